"""`analysis:`: candidate vs control over a window of live traffic, then the readout.

Every `poll` each replica is scraped, the engines watched as in a soak. At the window's end each
gate is judged on a 95 % interval (analysis/verdict.py): wholly outside its bound -> FAIL (the
phase's rollback); straddling it, short of `min_samples` or on an unknown series -> INCONCLUSIVE,
never a pass: it halts or fails as `not_enough_traffic:` says. The readout is the step's note.
A source unread for 3 polls in a row fails the step; a resumed run starts the window again.
"""

from __future__ import annotations

from typing import Any

from orchestrator.analysis.spec import AnalysisSpec
from orchestrator.analysis.verdict import FAIL, INCONCLUSIVE, PASS, judge_gate, overall, readout
from orchestrator.analysis.window import Scrape, WindowError, measure, ratio, window_of
from orchestrator.engine.steps.base import Activities, Node, Step, StepOutcome, error_text, fail, halt, ok, register

MISSES = 3


def so_far(spec: AnalysisSpec, scrapes: dict[str, list[Scrape]]) -> str:
    """The gates' points on the window so far, for the heartbeat (no interval, no verdict)."""
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


@register("analysis")
async def analysis(rt: Activities, node: Node, step: Step) -> StepOutcome:
    spec = step.spec(AnalysisSpec)
    if spec.source == "prometheus":
        if rt.entry.prometheus_url is None:
            return fail(f"analysis: source: prometheus, but the inventory names no prometheus_url for {rt.run.host}")
        client = rt.prometheus_client()  # `source: prometheus`: one client per step
        try:
            return await _run(rt, spec, client)
        finally:
            await client.aclose()
    return await _run(rt, spec, None)


async def _run(rt: Activities, spec: AnalysisSpec, prom: Any) -> StepOutcome:
    from orchestrator.metricproviders.prometheus_api import read_replica
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
                    q = spec.prometheus
                    assert q is not None
                    scrapes[r].append(await read_replica(prom, r, rt.clock.monotonic(), replica_label=q.replica_label,
                                                         selector=q.selector, matchers=(q.replicas or {}).get(r)))
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
    results = [judge_gate(g.metric(), tuple(g.replicas()), *g.bounds(), windows, spec.min_samples) for g in spec.gates]
    table = readout(results, windows, replicas, spec.window)
    verdict = overall(results)
    cand = replicas[0]
    if verdict == PASS:  # the decision last, in a word (a human reads the verdict, then what happens)
        return ok(table + f"\n=> PROMOTE: {cand} stays on the candidate")
    if verdict == FAIL:
        return fail(table + f"\n=> REJECT: {cand} goes back to what it ran before (the phase's rollback)")
    assert verdict == INCONCLUSIVE
    why = (f"inconclusive: the window cannot judge the candidate (an interval straddles its bound, too little "
           f"traffic, or a series unknown): neither promoted nor rolled back (the candidate keeps serving beside "
           f"the control); read the readout, then reject it with `orchestrate rollback {rt.run.host} --replica "
           f"{replicas[0]}` or judge it again\n" + table)
    return halt(why) if spec.not_enough_traffic == "halt" else fail(why)
