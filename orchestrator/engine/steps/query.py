"""`query:` a PromQL query (instant, or over `range:`) against the inventory's `prometheus_url` as a
gate: every value of every series must lie within [min, max]. No data, an unreachable API or an
error fails it (polled first with `within`): unread is not healthy.
"""

from __future__ import annotations

from typing import Any

from orchestrator.engine.steps.base import Activities, Node, Step, StepOutcome, fail, ok, register
from orchestrator.engine.steps.env import placeholder_values, poll
from orchestrator.language.gate_specs import QuerySpec, fill_query, query_number
from orchestrator.util.durations import format_duration


@register("query")
async def query(rt: Activities, node: Node, step: Step) -> StepOutcome:
    from orchestrator.metricproviders.prometheus_api import judge_query, parse_query_answer

    spec = step.spec(QuerySpec)
    if rt.entry.prometheus_url is None:
        return fail(f"query: the inventory names no prometheus_url for {rt.run.host}: add it to the host's entry")
    client: Any = rt.prometheus_client()
    seen: list[str] = []
    known: dict[str, str] = {}

    async def check() -> list[str]:
        values = known or await placeholder_values(rt, spec.promql)
        known.update(values)
        promql = fill_query(spec.promql, values)
        if spec.range is None:
            status, text = await client.query(promql)
        else:
            status, text = await client.query_range(promql, spec.range, spec.range_step())
        series = parse_query_answer(status, text)
        seen[:] = [f"{s.name()} = {query_number(min(s.values))}"
                   + (f"..{query_number(max(s.values))}" if max(s.values) != min(s.values) else "")
                   for s in series[:4] if s.values]
        return judge_query(series, spec.min, spec.max, query_number)

    try:
        problems = await poll(rt, spec.within, check, spec.text())
    finally:
        await client.aclose()
    where = f"query {spec.what + ' ' if spec.what else ''}({spec.bound_text()})"
    if problems:
        return fail(rt.scrub(f"{where}: " + "; ".join(problems[:4])
                             + (f" (and {len(problems) - 4} more)" if len(problems) > 4 else "")
                             + (f" (after {format_duration(spec.within)})" if spec.within else "")))
    return ok(rt.scrub(f"{where} holds: " + "; ".join(seen)))
