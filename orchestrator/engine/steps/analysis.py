"""`analysis:`: candidate vs control over a window of live traffic, then the readout.

Every `poll`, each replica the gates read is scraped through its soak-relay route; the engines
stay watched as in a soak (a candidate that restarts or stops serving fails the phase at once).
When the window is over, each gate is judged on a 95 % interval (orchestrator/analysis/verdict.py:
a seeded bootstrap over the scrape intervals): any gate whose interval lies wholly outside its
bound -> FAIL (the phase's rollback: the candidate goes back); a gate whose interval straddles the
bound, or that lacks `min_samples`, or reads a series the replica does not carry (unknown, not
zero) -> INCONCLUSIVE, which never passes: it halts for a human (default) or fails, as the
runbook's `not_enough_traffic:` says. The readout table (each point with its interval) is printed
and journaled (the step's note) whatever the verdict.

A relay that cannot be read for 3 polls in a row fails the step (unwatched is not judged). A
resumed run starts the window again (the scrapes are not journaled): the verdict then rests on a
whole window seen by one runner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.analysis.verdict import FAIL, INCONCLUSIVE, PASS, GateResult, bound_gate, overall, ratio_gate, readout
from orchestrator.analysis.window import Scrape, WindowError, measure, ratio, window_of
from orchestrator.engine.steps.base import StepOutcome, error_text, fail, halt, ok, register
from orchestrator.language.machine import Node
from orchestrator.language.runbook import Step

if TYPE_CHECKING:
    from orchestrator.analysis.spec import AnalysisSpec
    from orchestrator.analysis.window import ReplicaWindow
    from orchestrator.engine.steps.activities import Activities

MISSES = 3


def judge(spec: AnalysisSpec, windows: dict[str, ReplicaWindow]) -> list[GateResult]:
    out: list[GateResult] = []
    for g in spec.gates:
        if g.ratio is not None:
            r = g.ratio
            assert r.control is not None
            out.append(ratio_gate(r.metric, r.candidate, r.control, r.min, r.max, windows, spec.min_samples))
        elif g.max is not None:
            out.append(bound_gate(g.max.metric, g.max.replica, None, g.max.value, windows, spec.min_samples))
        else:
            assert g.min is not None
            out.append(bound_gate(g.min.metric, g.min.replica, g.min.value, None, windows, spec.min_samples))
    return out


def so_far(spec: AnalysisSpec, scrapes: dict[str, list[Scrape]]) -> str:
    """The gates' points on the window seen so far (a heartbeat's line: an operator watching sees
    the trend); no interval and no verdict: those are the whole window's."""
    try:
        windows = {r: window_of(r, s) for r, s in scrapes.items()}
    except WindowError as exc:
        return str(exc)
    parts = []
    for g in spec.gates:
        metric = g.metric()
        ms = [measure(metric, windows[r]) for r in g.replicas()]
        if any(m.value is None for m in ms):
            parts.append(f"{metric}: not known yet")
        elif len(ms) == 2:
            assert ms[0].value is not None and ms[1].value is not None
            parts.append(f"{metric} {'/'.join(g.replicas())} {ratio(ms[0].value, ms[1].value):.3g}")
        else:
            parts.append(f"{metric} {g.replicas()[0]} {ms[0].value:.3g}")
    return "; ".join(parts)


async def _read_dcgm(rt: Activities, spec: AnalysisSpec, scrapes: dict[str, list[Scrape]],
                    misses: dict[str, int]) -> str | None:
    """One scrape of DCGM's exporter, each replica's lowest free GPU memory added to its scrapes."""
    from orchestrator.metricproviders.dcgm import read_dcgm

    assert spec.dcgm is not None
    try:
        assert spec.relay is not None
        per = await read_dcgm(rt, spec.dcgm.port, spec.relay.token_variable,
                              {r: rt.rb.replica_gpus.get(r, []) for r in scrapes})
        misses["dcgm"] = 0
    except Exception as exc:  # the relay client's errors and bad text, counted, then named
        misses["dcgm"] = misses.get("dcgm", 0) + 1
        if misses["dcgm"] >= MISSES:
            return (f"analysis: DCGM's metrics (relay :{spec.dcgm.port}) could not be read {MISSES} times in a row: "
                    f"{rt.scrub(error_text(exc))}")
        return None
    for r, sc in per.items():
        scrapes[r].append(sc)
    return None


class _PrometheusReader:
    """`source: prometheus`: each replica's series from the inventory's query API (one client per step)."""

    def __init__(self, rt: Activities, spec: AnalysisSpec) -> None:
        assert spec.prometheus is not None
        self.rt, self.q, self.client = rt, spec.prometheus, rt.prometheus_client()

    async def read(self, replica: str) -> Scrape:
        from orchestrator.metricproviders.prometheus_api import read_replica

        return await read_replica(self.client, replica, self.rt.clock.monotonic(),
                                  replica_label=self.q.replica_label, selector=self.q.selector,
                                  matchers=(self.q.replicas or {}).get(replica))


@register("analysis")
async def analysis(rt: Activities, node: Node, step: Step) -> StepOutcome:
    spec = step.analysis
    assert spec is not None
    if spec.source == "prometheus":
        if rt.entry.prometheus_url is None:
            return fail(f"analysis: source: prometheus, but the inventory names no prometheus_url for {rt.run.host}")
        reader = _PrometheusReader(rt, spec)
        try:
            return await _run(rt, spec, reader)
        finally:
            await reader.client.aclose()
    return await _run(rt, spec, None)


async def _run(rt: Activities, spec: AnalysisSpec, prom: _PrometheusReader | None) -> StepOutcome:
    from orchestrator.metricproviders.relay_scrape import read_scrape

    replicas = spec.replicas()
    scrapes: dict[str, list[Scrape]] = {r: [] for r in replicas}
    misses = {r: 0 for r in replicas}
    watched = await rt.watch_engines()
    rt.start_heartbeat()
    start = rt.clock.monotonic()
    rt.emit("waiting", gate=f"analysis: {', '.join(replicas)} over {int(spec.window)} s of live traffic")
    while True:
        problem = await rt.engines_still_serving(watched)
        if problem:
            return fail(f"during the analysis: {problem}")
        if spec.dcgm is not None:
            problem = await _read_dcgm(rt, spec, scrapes, misses)
            if problem:
                return fail(problem)
        for r in replicas:
            try:
                if prom is not None:
                    scrapes[r].append(await prom.read(r))
                else:
                    assert spec.relay is not None
                    scrapes[r].append(await read_scrape(rt, spec.relay.ports[r], spec.relay.token_variable))
                misses[r] = 0
            except Exception as exc:  # the source's errors and bad answers, counted, then named
                misses[r] += 1
                if misses[r] >= MISSES:
                    where = "the Prometheus query API" if prom is not None else f"relay :{spec.relay.ports[r]}"  # type: ignore[union-attr]  # no Prometheus: the relay is set
                    return fail(f"analysis: {r}'s metrics ({where}) could not be read {MISSES} times in a row: "
                                f"{rt.scrub(error_text(exc))}")
        elapsed = rt.clock.monotonic() - start
        if elapsed >= spec.window:
            break
        rt.tick("analysis of " + ", ".join(replicas), start, spec.window, lambda: {"so_far": so_far(spec, scrapes)})
        await rt.wait(min(spec.poll, max(0.0, spec.window - elapsed)))
    try:
        windows = {r: window_of(r, s) for r, s in scrapes.items() if s}
    except WindowError as exc:
        return fail(f"analysis: {exc}")
    for r in replicas:  # a replica never read has an empty window: its gates lack traffic
        windows.setdefault(r, window_of(r, []))
    results = judge(spec, windows)
    # the readout is the step's note: printed with its transition and journaled with it
    table = readout(results, windows, replicas, spec.window)
    verdict = overall(results)
    cand = replicas[0]
    if verdict == PASS:  # the decision last, in a word (a human reads the verdict, then what happens)
        return ok(table + f"\n=> PROMOTE: {cand} stays on the candidate")
    if verdict == FAIL:
        return fail(table + f"\n=> REJECT: {cand} goes back to what it ran before (the phase's rollback)")
    assert verdict == INCONCLUSIVE
    run = getattr(rt, "run", None)
    host = getattr(run, "host", "HOST")
    why = (f"inconclusive: the window cannot judge the candidate (an interval straddles its bound, too little "
           f"traffic, or a series unknown): neither promoted nor rolled back (the candidate keeps serving beside "
           f"the control); read the readout, then reject it with `orchestrate rollback {host} --replica "
           f"{replicas[0]}` or judge it again\n" + table)
    return halt(why) if spec.not_enough_traffic == "halt" else fail(why)
