"""Canary window arithmetic (issue 23): bucket deltas, counter resets, quantiles, ratios, the
three verdicts, and the relay scrape parser."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.analysis.metric_defs import ABORTED, REQUESTS, TPOT, TTFT
from orchestrator.analysis.verdict import FAIL, INCONCLUSIVE, PASS, judge_gate, overall, readout
from orchestrator.analysis.window import (
    Histogram,
    Scrape,
    WindowError,
    counter_increase,
    histogram_increase,
    measure,
    quantile,
    ratio,
    window_of,
)
from orchestrator.metricproviders.metrics_text import MetricsTextError
from orchestrator.metricproviders.relay_scrape import parse_scrape

LES = (0.01, 0.02, 0.05, 0.1, math.inf)


def hist(counts: list[float], total_sum: float = 0.0) -> Histogram:
    """Cumulative histogram from per-bucket (non-cumulative) counts."""
    cum, acc = [], 0.0
    for c in counts:
        acc += c
        cum.append(acc)
    return Histogram(tuple(zip(LES, cum)), acc, total_sum)


# ------------------------------------------------------------------------------ counters
def test_counter_increase_plain_and_across_a_restart():
    assert counter_increase([10, 15, 30]) == (20.0, 0)
    # the engine restarted between 30 and 4: it served 4 since, the window 20 + 4
    assert counter_increase([10, 15, 30, 4, 9]) == (29.0, 1)
    assert counter_increase([5]) == (0.0, 0)


@given(st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=30))
def test_counter_increase_equals_what_was_served_whatever_the_restarts(steps):
    """An engine serves `steps[i]` requests between scrapes; it restarts (counter to 0, then what it
    served) whenever i % 7 == 3. The increase is what it served, never negative."""
    values, cur = [0.0], 0.0
    for i, s in enumerate(steps):
        cur = float(s) if (i % 7 == 3 and s > 0 and s < cur) else cur + s
        values.append(cur)
    inc, resets = counter_increase(values)
    assert inc >= 0
    if resets == 0:
        assert inc == values[-1] - values[0]


# ------------------------------------------------------------------------------ histograms
def test_histogram_increase_is_bucket_deltas_not_lifetime_totals():
    before = hist([100, 0, 0, 0, 0], 1.0)  # a lifetime of fast requests before the window
    after = hist([100, 0, 10, 0, 0], 1.4)  # inside the window: 10 requests, all in (0.02, 0.05]
    inc, resets = histogram_increase([before, after])
    assert resets == 0 and inc.count == 10
    assert [c for _, c in inc.buckets] == [0, 0, 10, 10, 10]
    assert inc.sum == pytest.approx(0.4)
    # the window's p50 sits inside (0.02, 0.05], not in the lifetime's first bucket
    assert 0.02 < quantile(0.5, inc) <= 0.05
    assert quantile(0.5, after) <= 0.01


def test_histogram_reset_counts_the_new_engine_whole():
    a, b = hist([5, 5, 0, 0, 0]), hist([10, 10, 0, 0, 0])
    restarted = hist([0, 0, 3, 0, 0])  # count 3 < 20: the engine restarted
    inc, resets = histogram_increase([a, b, restarted])
    assert resets == 1
    assert inc.count == 10 + 3
    assert [c for _, c in inc.buckets] == [5, 10, 13, 13, 13]


def test_histogram_whose_layout_changed_is_refused():
    other = Histogram(((0.5, 1.0), (math.inf, 1.0)), 1.0)
    with pytest.raises(WindowError, match="buckets changed"):
        histogram_increase([hist([1, 0, 0, 0, 0]), other])


# ------------------------------------------------------------------------------ quantiles
def test_quantile_interpolates_inside_the_bucket_like_prometheus():
    h = hist([0, 10, 0, 0, 0])  # 10 observations in (0.01, 0.02]
    assert quantile(0.5, h) == pytest.approx(0.015)
    assert quantile(1.0, h) == pytest.approx(0.02)
    h2 = hist([4, 4, 2, 0, 0])
    assert quantile(0.5, h2) == pytest.approx(0.01 + 0.01 * (5 - 4) / 4)
    # in the +Inf bucket: the highest finite bound
    assert quantile(0.99, hist([0, 0, 0, 1, 9])) == 0.1
    assert quantile(0.5, hist([0, 0, 0, 0, 0])) is None


@settings(max_examples=200)
@given(st.lists(st.integers(min_value=0, max_value=1000), min_size=5, max_size=5), st.floats(0.01, 1.0))
def test_quantile_lies_within_the_finite_range_and_is_monotone_in_q(counts, q):
    h = hist([float(c) for c in counts])
    v = quantile(q, h)
    if sum(counts) == 0:
        assert v is None
        return
    assert v is not None and 0.0 <= v <= 0.1
    lower = quantile(q / 2, h)
    assert lower is not None and lower <= v + 1e-12


def test_ratio_edges():
    assert ratio(0.5, 1.0) == 0.5
    assert ratio(0.0, 0.0) == 1.0
    assert math.isinf(ratio(0.01, 0.0))


# ------------------------------------------------------------------------------ gates and verdicts
def _scrapes(tpot_counts: list[float], requests: float, aborted: float, *, at: float = 1800.0,
             intervals: int = 30) -> list[Scrape]:
    """A window of `intervals` scrape intervals, each serving an equal share of `tpot_counts`
    (per-bucket TPOT observations), `requests` and `aborted` over the window."""
    out = []
    cum = [50.0, 0.0, 0.0, 0.0, 0.0]
    for i in range(intervals + 1):
        if i:
            cum = [c + t / intervals for c, t in zip(cum, tpot_counts)]
        out.append(Scrape(at * i / intervals, {REQUESTS: 1000.0 + requests * i / intervals, ABORTED: 5.0 + aborted * i / intervals},
                          {TPOT: hist(cum), TTFT: hist([0, 0, 0, 50, 0])}))
    return out


def test_ratio_gate_pass_fail_and_not_enough_traffic():
    fast = window_of("r2", _scrapes([0, 300, 0, 0, 0], 300, 0))  # TPOT ~15 ms
    slow = window_of("r1", _scrapes([0, 0, 300, 0, 0], 300, 0))  # TPOT ~35 ms
    w = {"r1": slow, "r2": fast}
    good = judge_gate("tpot_p50", ("r2", "r1"), None, 0.9, w, min_samples=200)
    assert good.verdict == PASS and good.observed == pytest.approx(0.015 / 0.035)
    assert good.interval is not None and good.interval[0] <= good.observed <= good.interval[1]
    bad = judge_gate("tpot_p50", ("r2", "r1"), None, 0.9, {"r1": fast, "r2": slow}, min_samples=200)
    assert bad.verdict == FAIL and "wholly outside <= 0.9" in bad.why
    # the same windows under a higher minimum: neither pass nor fail
    short = judge_gate("tpot_p50", ("r2", "r1"), None, 0.9, w, min_samples=301)
    assert short.verdict == INCONCLUSIVE and "r2 served 300" in short.why and "needs 301" in short.why


def test_error_rate_bound_and_completion_rate():
    w = {"r2": window_of("r2", _scrapes([0, 300, 0, 0, 0], 400, 8))}
    assert measure("error_rate", w["r2"]).value == pytest.approx(0.02)
    assert measure("completion_rate", w["r2"]).value == pytest.approx(0.98)
    assert measure("request_rate", w["r2"]).value == pytest.approx(400 / 1800)
    assert judge_gate("error_rate", ("r2",), None, 0.01, w, 100).verdict == FAIL
    assert judge_gate("error_rate", ("r2",), None, 0.05, w, 100).verdict == PASS
    assert judge_gate("completion_rate", ("r2",), 0.99, None, w, 100).verdict == FAIL
    assert judge_gate("error_rate", ("r2",), None, 0.05, w, 401).verdict == INCONCLUSIVE


def test_overall_fail_beats_inconclusive_beats_pass():
    w = {"r1": window_of("r1", _scrapes([0, 0, 300, 0, 0], 300, 0)), "r2": window_of("r2", _scrapes([0, 300, 0, 0, 0], 300, 9))}
    p = judge_gate("tpot_p50", ("r2", "r1"), None, 0.9, w, 200)
    f = judge_gate("error_rate", ("r2",), None, 0.01, w, 200)
    n = judge_gate("error_rate", ("r2",), None, 0.01, w, 10_000)
    assert overall([p]) == PASS
    assert overall([p, n]) == INCONCLUSIVE
    assert overall([p, n, f]) == FAIL
    assert overall([]) == INCONCLUSIVE  # nothing judged is not a pass


def test_readout_names_values_ratio_interval_bound_and_verdict():
    w = {"r1": window_of("r1", _scrapes([0, 0, 300, 0, 0], 300, 0)), "r2": window_of("r2", _scrapes([0, 300, 0, 0, 0], 300, 9))}
    res = [judge_gate("tpot_p50", ("r2", "r1"), None, 0.9, w, 200), judge_gate("error_rate", ("r2",), None, 0.01, w, 200)]
    text = readout(res, w, ["r2", "r1"], 1800)
    first = text.splitlines()[0]
    assert first.startswith("canary readout: FAIL over 30 min")
    assert "r2/r1 0.429 [0.429, 0.429]" in text and "<= 0.9" in text and "PASS" in text  # no noise: a point interval
    assert "15.0 ms (n=300)" in text and "35.0 ms (n=300)" in text
    assert "FAIL: error_rate of r2 <= 0.01: r2 error_rate = 3.00 %, 95 % interval [3.00 %, 3.00 %], wholly outside" in text


# ------------------------------------------------------------------------------ the relay's text
TEXT = """# HELP sglang:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE sglang:inter_token_latency_seconds histogram
sglang:inter_token_latency_seconds_bucket{le="0.01",model_name="m"} 1.0
sglang:inter_token_latency_seconds_bucket{le="0.02",model_name="m"} 3.0
sglang:inter_token_latency_seconds_bucket{le="+Inf",model_name="m"} 4.0
sglang:inter_token_latency_seconds_count{model_name="m"} 4.0
sglang:inter_token_latency_seconds_sum{model_name="m"} 0.07
# HELP sglang:num_requests_total Number of requests processed.
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="m"} 12.0
# TYPE sglang:num_aborted_requests_total counter
sglang:num_aborted_requests_total{model_name="m"} 1.0
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m"} 2
"""


def test_parse_scrape_reads_histograms_and_counters():
    s = parse_scrape(TEXT, 42.0)
    assert s.at == 42.0
    assert s.counters == {REQUESTS: 12.0, ABORTED: 1.0}
    h = s.histograms[TPOT]
    assert h.buckets == ((0.01, 1.0), (0.02, 3.0), (math.inf, 4.0)) and h.count == 4.0 and h.sum == 0.07


def test_parse_scrape_refuses_bad_text_and_a_histogram_without_inf():
    with pytest.raises(MetricsTextError, match="does not parse"):
        parse_scrape('sglang:x{model_name="unterminated 1\n', 0.0)
    no_inf = "\n".join(line for line in TEXT.splitlines() if 'le="+Inf"' not in line) + "\n"
    with pytest.raises(MetricsTextError, match="no \\+Inf bucket"):
        parse_scrape(no_inf, 0.0)


@settings(max_examples=200)
@given(st.lists(st.integers(0, 500), min_size=5, max_size=5), st.lists(st.integers(0, 500), min_size=5, max_size=5),
       st.integers(0, 3), st.floats(0.05, 0.99))
def test_the_window_sees_only_its_own_observations(before, during, restart_at, q):
    """Scrapes before, (maybe a restart), during: the window's buckets are exactly what was
    observed in it, so its quantile is the quantile of those observations alone."""
    lifetime = hist([float(c) for c in before])
    series = [lifetime]
    if restart_at == 0:  # the engine restarted inside the window: counts start again from 0
        series.append(hist([float(c) for c in during]))
    else:
        series.append(hist([float(b + d) for b, d in zip(before, during)]))
    inc, resets = histogram_increase(series)
    want = hist([float(c) for c in during])
    if restart_at == 0 and sum(during) >= sum(before) and all(
            d >= b for d, b in zip(hist([float(c) for c in during]).buckets, lifetime.buckets)):
        return  # indistinguishable from growth without a restart (Prometheus cannot tell either)
    assert [c for _, c in inc.buckets] == [c for _, c in want.buckets]
    assert quantile(q, inc) == quantile(q, want)


def test_a_metric_the_replica_does_not_expose_is_unknown_not_low_traffic():
    w = {"r1": window_of("r1", _scrapes([0, 0, 300, 0, 0], 300, 0)),
         "r2": window_of("r2", [Scrape(0.0, {REQUESTS: 5.0}), Scrape(1800.0, {REQUESTS: 900.0})])}
    g = judge_gate("tpot_p50", ("r2", "r1"), None, 0.9, w, 200)
    assert g.verdict == INCONCLUSIVE and "r2's /metrics carries no sglang:inter_token_latency_seconds: unknown" in g.why
    never_read = {"r1": w["r1"], "r2": window_of("r2", [])}
    assert "r2 served 0" in judge_gate("tpot_p50", ("r2", "r1"), None, 0.9, never_read, 200).why
