"""The statistical judge (orchestrator/analysis/verdict.py): a 95 % interval per gate from a seeded
bootstrap over the scrape intervals, classified against the bound; unknown series are
inconclusive, never zero. Pure: windows built here, no simulator."""

from __future__ import annotations

import math
import random
import re
from pathlib import Path

import pytest

from orchestrator.analysis.metric_defs import (
    ABORTED,
    E2E,
    GENERATION_TOKENS,
    HTTP_5XX,
    HTTP_RESPONSES,
    HTTP_SERVED,
    METRICS,
    PROMPT_HIST,
    PROMPT_TOKENS,
    REQUESTS,
    TPOT,
)
from orchestrator.analysis.verdict import (
    FAIL,
    INCONCLUSIVE,
    MIN_INTERVALS,
    PASS,
    classify,
    judge_gate,
    readout,
)
from orchestrator.analysis.window import Histogram, Scrape, measure, window_of
from orchestrator.metricproviders.relay_scrape import COUNTERS, HISTOGRAMS, parse_scrape

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "reference" / "samples" / "sglang-metrics.txt"
FLAGS = SAMPLE.with_name("sglang-metrics-flags.txt")
LES = (0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, math.inf)  # SGLang's TPOT bounds around 30 ms


def _cdf(x: float, median: float, sigma: float = 0.35) -> float:
    return 1.0 if math.isinf(x) else 0.5 * (1.0 + math.erf(math.log(x / median) / (sigma * math.sqrt(2.0))))


def noisy(median: float, *, seed: int, noise: float, intervals: int = 30, per: int = 20, aborted_per: float = 0.0,
          drop: str | None = None, appear_at: int | None = None) -> list[Scrape]:
    """`intervals` one-minute scrape intervals of `per` requests each; each interval's TPOT median
    is `median` times a log-normal factor of spread `noise` (the minute's traffic mix)."""
    rng = random.Random(seed)
    cum = [0.0] * len(LES)
    count = total = 0.0
    out = []
    for i in range(intervals + 1):
        if i:
            m = median * math.exp(rng.gauss(0.0, noise))
            cum = [c + per * _cdf(le, m) for c, le in zip(cum, LES)]
            count += per
            total += per * m
        counters = {REQUESTS: count, ABORTED: aborted_per * i}
        if drop:
            counters.pop(drop)
        if appear_at is not None and i < appear_at:
            counters.pop(ABORTED, None)
        out.append(Scrape(60.0 * i, counters, {TPOT: Histogram(tuple(zip(LES, cum)), count, total)}))
    return out


def test_classify_against_the_bound():
    assert classify((0.58, 0.69), None, 0.9) == PASS
    assert classify((0.95, 1.2), None, 0.9) == FAIL
    assert classify((0.85, 0.95), None, 0.9) == INCONCLUSIVE
    assert classify((0.995, 1.0), 0.99, None) == PASS and classify((0.9, 0.98), 0.99, None) == FAIL
    assert classify((0.6, 0.8), 0.5, 0.9) == PASS and classify((0.4, 0.6), 0.5, 0.9) == INCONCLUSIVE


@pytest.mark.parametrize(("factor", "want"), [(0.7, PASS), (1.3, FAIL), (1.03, INCONCLUSIVE)])
def test_a_candidate_faster_slower_or_within_the_noise(factor, want):
    """Against `r2/r1 <= 1.0` under live noise: 30 % faster passes, 30 % slower fails, 3 % slower
    is inside the noise: its interval straddles 1.0, neither a pass nor a fail."""
    w = {"r1": window_of("r1", noisy(0.030, seed=1, noise=0.15)),
         "r2": window_of("r2", noisy(0.030 * factor, seed=2, noise=0.15))}
    g = judge_gate("tpot_p50", ("r2", "r1"), None, 1.0, w, 200)
    assert g.verdict == want, g.why
    assert g.interval is not None and g.interval[0] < g.interval[1]
    assert f"r2/r1 = {g.observed:.3g}, 95 % interval [" in g.why


def test_the_same_window_gives_the_same_interval():
    w = {"r1": window_of("r1", noisy(0.030, seed=1, noise=0.15)),
         "r2": window_of("r2", noisy(0.031, seed=2, noise=0.15))}
    a = judge_gate("tpot_p50", ("r2", "r1"), None, 1.0, w, 200)
    b = judge_gate("tpot_p50", ("r2", "r1"), None, 1.0, dict(w), 200)
    assert a.interval == b.interval and a.why == b.why


def test_wider_noise_gives_a_wider_interval():
    def width(noise: float) -> float:
        w = {"r1": window_of("r1", noisy(0.030, seed=1, noise=noise)),
             "r2": window_of("r2", noisy(0.030, seed=2, noise=noise))}
        iv = judge_gate("tpot_p50", ("r2", "r1"), None, 1.2, w, 200).interval
        assert iv is not None
        return iv[1] - iv[0]

    assert width(0.02) < width(0.1) < width(0.3)


def test_a_missing_abort_counter_is_unknown_never_a_perfect_completion():
    w = {"r1": window_of("r1", noisy(0.030, seed=1, noise=0.05)),
         "r2": window_of("r2", noisy(0.030, seed=2, noise=0.05, drop=ABORTED))}
    m = measure("completion_rate", w["r2"])
    assert m.value is None and m.absent == ABORTED
    g = judge_gate("completion_rate", ("r2",), 0.99, None, w, 200)
    assert g.verdict == INCONCLUSIVE and "carries no sglang:num_aborted_requests_total: unknown, not zero" in g.why
    vs = judge_gate("completion_rate", ("r2", "r1"), 0.99, None, w, 200)
    assert vs.verdict == INCONCLUSIVE
    assert "unknown" in readout([g], w, ["r2", "r1"], 1800)


def test_a_series_first_seen_mid_window_is_unknown_not_its_later_increments():
    w = {"r2": window_of("r2", noisy(0.030, seed=2, noise=0.05, aborted_per=1.0, appear_at=20))}
    assert ABORTED in w["r2"].partial
    g = judge_gate("error_rate", ("r2",), None, 0.01, w, 200)
    assert g.verdict == INCONCLUSIVE and "in only part of the window" in g.why


def test_completion_is_compared_with_the_control():
    """Both replicas abort 3 %: r2's completion against r1's is 1.0 (a pass of `>= 0.99`), where its
    own rate against 0.99 fails; a candidate aborting 10 % against a clean control fails."""
    w = {"r1": window_of("r1", noisy(0.030, seed=1, noise=0.05, aborted_per=0.6)),
         "r2": window_of("r2", noisy(0.030, seed=2, noise=0.05, aborted_per=0.6))}
    assert judge_gate("completion_rate", ("r2", "r1"), 0.99, None, w, 200).verdict == PASS
    assert judge_gate("completion_rate", ("r2",), 0.99, None, w, 200).verdict == FAIL
    w["r1"] = window_of("r1", noisy(0.030, seed=1, noise=0.05))
    w["r2"] = window_of("r2", noisy(0.030, seed=2, noise=0.05, aborted_per=2.0))
    assert judge_gate("completion_rate", ("r2", "r1"), 0.99, None, w, 200).verdict == FAIL


def test_too_few_scrape_intervals_are_inconclusive_whatever_the_traffic():
    w = {"r1": window_of("r1", noisy(0.030, seed=1, noise=0.05, intervals=MIN_INTERVALS - 1, per=100)),
         "r2": window_of("r2", noisy(0.020, seed=2, noise=0.05, intervals=MIN_INTERVALS - 1, per=100))}
    g = judge_gate("tpot_p50", ("r2", "r1"), None, 0.9, w, 200)
    assert g.verdict == INCONCLUSIVE and f"needs {MIN_INTERVALS}" in g.why


def test_the_readout_shows_the_interval_beside_the_point():
    w = {"r1": window_of("r1", noisy(0.030, seed=1, noise=0.1)),
         "r2": window_of("r2", noisy(0.019, seed=2, noise=0.1))}
    g = judge_gate("tpot_p50", ("r2", "r1"), None, 0.9, w, 200)
    text = readout([g], w, ["r2", "r1"], 1800)
    row = next(line for line in text.splitlines() if line.startswith("tpot_p50"))
    assert g.interval is not None
    assert f"r2/r1 {g.observed:.3g} [{g.interval[0]:.3g}, {g.interval[1]:.3g}]" in row and "<= 0.9" in row and "PASS" in row


def test_the_metric_names_are_the_recorded_sglang_page():
    """Every series an analysis metric reads from the engine is named in a recorded sample: SGLang's
    /metrics page (sglang-metrics.txt) or the collector's definitions copied into
    sglang-metrics-flags.txt (the inter-token latency, request, abort, prompt-length and HTTP
    series, with the flags that export them)."""
    text = SAMPLE.read_text()
    s = parse_scrape(text, 0.0)
    flags = FLAGS.read_text()
    defined = set(re.findall(r'name="(sglang:[^"]+)"', flags))
    exposed = parse_scrape(flags.split("\n## exposition\n", 1)[1].split("\n\n", 1)[0], 0.0)
    engine_series = {d.source for d in METRICS.values() if d.origin == "engine" and not d.kind.startswith("gauge")}
    for name in engine_series:
        assert name in s.counters or name in s.histograms or name in defined, name
    assert {REQUESTS, ABORTED, TPOT, PROMPT_HIST, HTTP_RESPONSES} <= defined
    assert {E2E, TPOT, PROMPT_HIST} <= set(HISTOGRAMS) and {PROMPT_TOKENS, GENERATION_TOKENS, HTTP_RESPONSES} <= set(COUNTERS)
    assert s.histograms[E2E].count == 11228.0
    assert s.counters[GENERATION_TOKENS] == 7.557572e06
    # the recorded HTTP counter: /generate's 5 of 100 responses are 500s; /metrics' are not requests
    assert exposed.counters[HTTP_SERVED] == 100.0 and exposed.counters[HTTP_5XX] == 5.0


def test_the_new_metrics_over_a_window():
    def scrape(at: float, n: float, gen: float, prompt: float, e2e: list[float], tpot_sum: float) -> Scrape:
        les = (1.0, 10.0, 60.0, math.inf)
        return Scrape(at, {REQUESTS: n, GENERATION_TOKENS: gen, PROMPT_TOKENS: prompt},
                      {E2E: Histogram(tuple(zip(les, e2e)), e2e[-1], 0.0), TPOT: Histogram(((0.05, n), (math.inf, n)), n, tpot_sum)})

    w = window_of("r2", [scrape(0, 100, 1000, 5000, [0, 50, 100, 100], 3.0),
                         scrape(60, 300, 61000, 645000, [0, 50, 300, 300], 9.0)])
    assert measure("generation_tokens_per_request", w).value == pytest.approx(300.0)
    assert measure("prompt_tokens_per_request", w).value == pytest.approx(3200.0)
    assert measure("tpot_mean", w).value == pytest.approx(0.03)
    assert measure("e2e_p50", w).value == pytest.approx(10.0 + 50.0 * 100 / 200)


def test_observations_in_too_few_intervals_cannot_be_bounded():
    """All of r2's traffic in 2 of 30 intervals: most resamples hold none of it, so no interval is
    claimed (inconclusive), however many observations the window has in total."""
    quiet = noisy(0.030, seed=2, noise=0.05, per=0)
    burst = noisy(0.020, seed=2, noise=0.05, intervals=2, per=300)
    scrapes = []
    for i, s in enumerate(quiet):  # flat for 28 intervals, then the two bursts
        if i < 29:
            scrapes.append(s)
    for s in burst[1:]:
        scrapes.append(Scrape(60.0 * (28 + len(scrapes) - 28), s.counters, s.histograms))
    w = {"r1": window_of("r1", noisy(0.030, seed=1, noise=0.05)), "r2": window_of("r2", scrapes)}
    assert len(w["r2"].intervals) == 30 and measure("tpot_p50", w["r2"]).samples == 600
    g = judge_gate("tpot_p50", ("r2", "r1"), None, 0.9, w, 200)
    assert g.verdict == INCONCLUSIVE and "sit in too few scrape intervals" in g.why


def test_a_dcgm_read_between_engine_scrapes_leaves_no_series_partial():
    """DCGM's reads are merged into a replica's scrapes with only a gauge: they are not the
    engine's scrapes, so the engine's series are still carried by every one of those."""
    from orchestrator.analysis.metric_defs import FB_FREE

    engine = noisy(0.030, seed=2, noise=0.05)
    dcgm = [Scrape(s.at + 1.0, gauges={FB_FREE: 9000.0}) for s in engine]
    w = window_of("r2", engine + dcgm)
    assert w.partial == frozenset() and len(w.intervals) == 30
    assert measure("completion_rate", w).value == 1.0


def test_a_declared_counter_without_a_sample_is_zero_an_undeclared_one_unknown():
    """prometheus_client prints a labelled counter's HELP/TYPE before its first child exists (an
    engine that has aborted nothing yet): that is 0 aborts. No TYPE line at all (a build or a
    multiprocess exporter without it) is unknown."""
    head = ("# TYPE sglang:num_requests_total counter\nsglang:num_requests_total{model_name=\"m\"} 12.0\n")
    declared = head + ("# HELP sglang:num_aborted_requests_total Number of requests aborted.\n"
                       "# TYPE sglang:num_aborted_requests_total counter\n")
    assert parse_scrape(declared, 0.0).counters == {REQUESTS: 12.0, ABORTED: 0.0}
    assert parse_scrape(head, 0.0).counters == {REQUESTS: 12.0}
