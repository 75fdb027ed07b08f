"""`presence:` on every model-proxy peer the host is listed healthy under each `listed` role's domain
and not at all under each `absent` one, polled until `within`. With `hosts: others` (the capacity
guard) the runbook's other hosts must be listed, known to the inventory, and have no unfinished run.
"""

from __future__ import annotations

from orchestrator.engine.rules.prerequisites import unfinished
from orchestrator.engine.steps.base import Activities, Node, Step, StepOutcome, fail, halt, ok, register
from orchestrator.engine.steps.env import poll
from orchestrator.language.step_specs import PresenceSpec


@register("presence")
async def presence(rt: Activities, node: Node, step: Step) -> StepOutcome:
    p = step.spec(PresenceSpec)
    if p.hosts == "others":
        others = [h for h in rt.rb.hosts if h != rt.run.host]
        unknown = [h for h in others if rt.address_of(h) is None]
        if unknown:  # never assume a host we cannot ask about carries the domain
            return fail(f"capacity cannot be confirmed: {', '.join(unknown)} not in the inventory (the runbook's "
                        f"hosts: {', '.join(rt.rb.hosts)}); add it to the inventory, or take it out of the runbook's "
                        f"hosts: if it no longer belongs to this tier")
        busy = unfinished(rt.journal, others)
        if busy:  # two hosts of one tier never leave it at once, even from two terminals
            return fail("one host of the tier at a time: " + "; ".join(
                f"{h} has run {r.run_id} ({r.kind}) that has not ended, at {r.state}" for h, r in busy))
        targets = {h: rt.address_of(h) or "" for h in others}
    else:
        targets = {rt.run.host: rt.entry.model_proxy_address}
    shown = ", ".join(f"{h} ({a})" for h, a in targets.items())
    roles = [f"listed under {r}" for r in p.listed] + [f"absent from {r}" for r in p.absent]
    said = f"both peers: {shown} " + ", ".join(roles)
    rt.emit("waiting", gate=said)
    problems = await poll(rt, p.within, lambda: rt.presence_problems(targets, p.listed, p.absent))
    if problems:
        return fail("; ".join(problems))
    short = await rt.recheck_after_drain(step) if p.absent else None  # a drain confirmed: the tier again
    return halt(short) if short else ok(said)
