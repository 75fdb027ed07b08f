"""`min_samples` is the analysis' load requirement (docs/runbook-language.md): a replica withdrawn
from routing serves nothing and can never pass a traffic gate; a gauge gate needs scrapes, not
traffic, so it passes on an idle replica (why a canary keeps a traffic gate beside it)."""

from __future__ import annotations

from orchestrator.analysis.metric_defs import ABORTED, FB_FREE, REQUESTS, TPOT
from orchestrator.analysis.verdict import FAIL, INCONCLUSIVE, PASS, judge_gate, overall
from orchestrator.analysis.window import Histogram, Scrape, window_of

BUCKETS = (0.01, 0.02, 0.05, float("inf"))


def _scrapes(per_min: float, minutes: int = 30) -> list[Scrape]:
    out = []
    for i in range(minutes + 1):
        n = per_min * i
        h = Histogram(tuple((le, n * f) for le, f in zip(BUCKETS, (0.2, 0.9, 1.0, 1.0))), n, n * 0.018)
        out.append(Scrape(i * 60.0, counters={REQUESTS: n, ABORTED: 0.0}, histograms={TPOT: h},
                          gauges={FB_FREE: 3800.0}))
    return out


def test_a_withdrawn_replica_never_passes_a_traffic_gate():
    w = {"r2": window_of("r2", _scrapes(0.0)), "r1": window_of("r1", _scrapes(40.0))}
    gates = [judge_gate("tpot_p50", ("r2", "r1"), None, 0.9, w, 200),
             judge_gate("completion_rate", ("r2",), 0.99, None, w, 200),
             judge_gate("request_rate", ("r2",), 0.1, None, w, 200)]
    assert [g.verdict for g in gates] == [INCONCLUSIVE] * 3
    assert all("not enough traffic: r2 served 0" in g.why for g in gates)
    # the gauge needs scrapes, not traffic: it passes on the idle replica; the readout stays inconclusive
    memory = judge_gate("min_free_device_memory_gb", ("r2",), 3.0, None, w, 200)
    assert memory.verdict == PASS and overall([*gates, memory]) == INCONCLUSIVE


def test_a_trickle_over_the_floor_is_judged_and_a_rate_gate_asks_for_more():
    w = {"r2": window_of("r2", _scrapes(10.0))}  # 300 requests in 30 minutes: over a floor of 200
    assert judge_gate("completion_rate", ("r2",), 0.99, None, w, 200).verdict == PASS
    assert judge_gate("request_rate", ("r2",), 0.5, None, w, 200).verdict == FAIL  # 0.17/s, wholly under 0.5/s
