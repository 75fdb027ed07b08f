"""`presence:` the host's place in the model-proxy peers' domains (a drain, a rejoin, the tier's capacity).

Rules: on every model-proxy peer the host is listed healthy under each `listed` role's domain and
not listed at all (on any port) under each `absent` role's domain, polled until `within` runs out.
With `hosts: others` (the capacity guard) the runbook's other hosts must be listed, and none of
them may have a run that has not ended (one host of a tier at a time, whoever runs it); an other
host the inventory does not know fails the gate. A drain confirmed asks the tier again at once
(`rt.recheck_after_drain`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.engine.rules.prerequisites import unfinished
from orchestrator.engine.steps.base import StepOutcome, fail, halt, ok, register
from orchestrator.engine.steps.env import poll
from orchestrator.language.machine import Node
from orchestrator.language.runbook import Step

if TYPE_CHECKING:
    from orchestrator.engine.steps.activities import Activities


@register("presence")
async def presence(rt: Activities, node: Node, step: Step) -> StepOutcome:
    p = step.presence
    assert p is not None
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
    # a peer that does not answer is a problem, retried
    problems = await poll(rt, p.within, lambda: rt.presence_problems(targets, p.listed, p.absent))
    if problems:
        return fail("; ".join(problems))
    short = await rt.recheck_after_drain(step) if p.absent else None  # a drain confirmed: the tier again
    return halt(short) if short else ok(said)
