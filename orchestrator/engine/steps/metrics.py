"""`metrics:` Prometheus text read from one engine through the soak relay.
- host-restore evidence: through the relay, a prompt, `evict` unrelated prompts, a read, the prompt
  again, a second read: each counter must rise across that follow-up (absent: not risen);
- a gauge must lie within its bounds on every label set; with `within` it is polled until it does
  (a relay that does not answer yet included).
"""

from __future__ import annotations

from typing import Any

from orchestrator.engine.step_descriptions import bound_text
from orchestrator.engine.steps.base import Activities, Node, Step, StepOutcome, error_text, fail, ok, register
from orchestrator.language.machine import Event
from orchestrator.language.step_specs import GaugeBound, MetricsSpec
from orchestrator.metricproviders.metrics_text import MetricsTextError, samples, total


def gauge_problem(text: str, g: GaugeBound) -> str | None:
    found = samples(text, g.name)
    if not found:
        return f"{g.name} is not exposed"
    for s in found:
        if (g.min is not None and s.value < g.min) or (g.max is not None and s.value > g.max):
            return f"{g.name}{s.labels or ''} = {s.value:g}, outside {bound_text(g)}"
    return None


@register("metrics")
async def metrics_evidence(rt: Activities, node: Node, step: Step) -> StepOutcome:
    m = step.spec(MetricsSpec)
    env = await rt.ensure_env()
    client = rt.relay_client(m.relay.port, env.get(m.relay.token_variable, ""))
    where = f"relay :{m.relay.port}"
    notes: list[str] = []
    try:
        if m.increase:
            res = await _host_restore(rt, client, node, m.increase, m.evict, where)
            if res.event is not Event.OK:
                return res
            notes.append(res.note)
        for g in m.gauges:
            deadline = rt.clock.monotonic() + (g.within or 0.0)
            rt.emit("waiting", gate=f"{where}: {bound_text(g)}")
            while True:
                seen = rt.clock.monotonic()  # when this observation began: a stall after it is never read as time the condition had
                try:
                    problem = gauge_problem(await client.metrics_text(), g)
                except Exception as exc:  # a relay just started may refuse a moment: polled like the gauge
                    if seen >= deadline:
                        raise
                    problem = rt.scrub(error_text(exc))
                if problem is None:
                    notes.append(f"{bound_text(g)} holds")
                    break
                if seen >= deadline:
                    return fail(f"{where}: {rt.scrub(problem)}")
                await rt.wait()
    except MetricsTextError as exc:
        return fail(f"{where}: {exc}")
    except Exception as exc:  # the relay's client errors, named in the note
        return fail(f"{where}: {rt.scrub(error_text(exc))}")
    return ok(f"{where}: " + "; ".join(notes))


async def _host_restore(rt: Activities, client: Any, node: Node, counters: list[str], evict: int,
                        where: str) -> StepOutcome:
    nonce = f"{rt.run.run_id}-{node.id}"
    doc = f"Host-restore check {nonce}. " + (
        "This prefix is sent once, pushed out of the device pool by unrelated prompts, then sent again. " * 24)
    rt.emit("waiting", gate=f"{where}: {', '.join(counters)} rises across a follow-up whose prefix left the device pool")
    await client.prompt(rt.rb.model, doc)
    for i in range(evict):
        await client.prompt(rt.rb.model, f"Unrelated filler {i} for {nonce}. " + "Nothing here repeats the check prefix. " * 24)
    before = await client.metrics_text()
    second = await client.prompt(rt.rb.model, doc)
    after = await client.metrics_text()
    rose = []
    for name in counters:
        b, a = total(before, name), total(after, name)
        if a is None:
            return fail(f"{where}: {name} is not exposed (no HiCache host tier on this engine?)")
        if b is None or a <= b:
            return fail(f"{where}: {name} did not rise across the follow-up ({b if b is not None else 'absent':} -> {a:g}; "
                        f"the follow-up reported {second.cached_tokens} cached tokens): no host-restore evidence")
        rose.append(f"{name} {b:g} -> {a:g}")
    return ok("host-restore evidence: " + ", ".join(rose))
