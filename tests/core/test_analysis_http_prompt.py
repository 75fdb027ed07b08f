"""The HTTP 5xx rate and the prompt-length metrics (orchestrator/analysis/metric_defs.py): read
from SGLang's `sglang:http_responses_total{endpoint,status_code,method}` and
`sglang:prompt_tokens_histogram` as the recorded sample (tests/data/reference/samples/
sglang-metrics-flags.txt) names them; a family the engine does not export is unknown, never 0."""

from __future__ import annotations

import math

import pytest

from orchestrator.analysis.metric_defs import PROMPT_HIST
from orchestrator.analysis.verdict import FAIL, INCONCLUSIVE, PASS, judge_gate, readout
from orchestrator.analysis.window import Histogram, measure, share_above, window_of
from orchestrator.metricproviders.relay_scrape import parse_scrape

PROMPT_LES = (15000, 20000, 40000, 66000, 99000, math.inf)


def _text(i: int, *, ok: int = 100, e500: int = 0, e503: int = 0, health: int = 20, long: int = 10,
          http: bool = True, prompts: bool = True, e500_from: int = 0) -> str:
    """The /metrics text after `i` one-minute intervals: per interval `ok` 200s, `e500` 500s (from
    interval `e500_from` on), `e503` 503s on /v1/chat/completions, `health` /health probes; `long`
    of the `ok` requests with a 90K-token prompt, the others 18K."""
    n500 = e500 * max(0, i - e500_from)
    lines = ["# TYPE sglang:num_requests_total counter", f'sglang:num_requests_total{{model_name="m"}} {ok * i}']
    if http:
        lines += ["# TYPE sglang:http_responses_total counter"]
        rows = [("/v1/chat/completions", "200", ok * i), ("/v1/chat/completions", "500", n500),
                ("/v1/chat/completions", "503", e503 * i), ("/health", "200", health * i), ("/metrics", "500", i)]
        lines += [f'sglang:http_responses_total{{endpoint="{e}",method="POST",status_code="{c}"}} {n}'
                  for e, c, n in rows if n]
    if prompts:
        n, nl = ok * i, long * i
        lines += ["# TYPE sglang:prompt_tokens_histogram histogram"]
        for le in PROMPT_LES:
            c = (le >= 20000) * (n - nl) + (le >= 99000) * nl
            lines.append(f'sglang:prompt_tokens_histogram_bucket{{le="{"+Inf" if math.isinf(le) else le}",model_name="m"}} {c}')
        lines += [f'sglang:prompt_tokens_histogram_count{{model_name="m"}} {n}',
                  f'sglang:prompt_tokens_histogram_sum{{model_name="m"}} {(n - nl) * 18000 + nl * 90000}']
    return "\n".join(lines) + "\n"


def _window(replica: str, intervals: int = 30, **kw):
    return window_of(replica, [parse_scrape(_text(i, **kw), 60.0 * i) for i in range(intervals + 1)])


def test_the_5xx_rate_counts_the_generation_endpoints_500s_not_503s_nor_probes():
    w = _window("r2", ok=95, e500=5, e503=7)
    m = measure("http_5xx_rate", w)
    # 5 of 107 chat responses a minute are 500s; the 503s (a full queue) count as answered, not as
    # errors; /health and /metrics (its own 500s included) are not requests
    assert m.value == pytest.approx(5 / 107) and m.samples == 107 * 30
    g = judge_gate("http_5xx_rate", ("r2",), None, 0.005, {"r2": w}, 200)
    assert g.verdict == FAIL and "wholly outside <= 0.005" in g.why


def test_a_5xx_status_first_seen_mid_window_counts_from_zero():
    """The family is exported throughout, so a status with no child yet has answered nothing: the
    first 500 halfway through is an increase, not an unknown."""
    w = {"r2": _window("r2", e500=3, e500_from=15), "r1": _window("r1")}
    assert measure("http_5xx_rate", w["r2"]).value == pytest.approx(3 * 15 / (100 * 30 + 3 * 15))
    assert measure("http_5xx_rate", w["r1"]).value == 0.0
    g = judge_gate("http_5xx_rate", ("r1",), None, 0.005, w, 200)
    assert g.verdict == PASS, g.why


def test_an_engine_without_the_http_counter_is_unknown_never_error_free():
    w = {"r2": _window("r2", http=False), "r1": _window("r1")}
    g = judge_gate("http_5xx_rate", ("r2", "r1"), None, 1.5, w, 200)
    assert g.verdict == INCONCLUSIVE
    assert "r2's /metrics carries no sglang:http_responses_total" in g.why and "unknown, not zero" in g.why
    assert "unknown" in readout([g], w, ["r2", "r1"], 1800)


def test_share_above_interpolates_inside_the_bucket_that_holds_the_threshold():
    h = Histogram(((40000.0, 60.0), (66000.0, 86.0), (math.inf, 100.0)), 100.0)
    # 26 prompts in (40000, 66000]: 65536 sits 25536/26000 of the way, so ~25.5 of them below it
    assert share_above(65536.0, h) == pytest.approx(1 - (60 + 26 * 25536 / 26000) / 100)
    assert share_above(66000.0, h) == pytest.approx(0.14)
    assert share_above(1e9, h) == pytest.approx(0.14)  # past the last bound: the +Inf bucket, an upper estimate
    assert share_above(1.0, Histogram(((10.0, 0.0), (math.inf, 0.0)), 0.0)) is None


def test_the_long_prompt_share_and_the_prompt_quantiles_over_a_window():
    w = {"r2": _window("r2", long=10), "r1": _window("r1", long=20)}
    assert measure("long_prompt_share", w["r2"]).value == pytest.approx(0.10)
    assert measure("prompt_tokens_p50", w["r2"]).value == pytest.approx(15000 + 5000 * 50 / 90)
    # r2 saw half r1's share of long prompts: its latencies are not measured on the same mix
    g = judge_gate("long_prompt_share", ("r2", "r1"), 0.8, 1.25, w, 200)
    assert g.verdict == FAIL and g.observed == pytest.approx(0.5) and "wholly outside within [0.8, 1.25]" in g.why
    text = readout([g], w, ["r2", "r1"], 1800)
    assert "10.00 % (n=3000)" in text and "20.00 % (n=3000)" in text


def test_an_engine_without_the_prompt_histogram_is_unknown():
    w = {"r2": _window("r2", prompts=False), "r1": _window("r1")}
    g = judge_gate("long_prompt_share", ("r2", "r1"), 0.5, 2.0, w, 200)
    assert g.verdict == INCONCLUSIVE and f"r2's /metrics carries no {PROMPT_HIST}: unknown, not zero" in g.why
    few = {"r2": _window("r2", ok=2, long=0), "r1": _window("r1")}
    assert "not enough traffic: r2 served 60 prompts in the window" in judge_gate("long_prompt_share", ("r2", "r1"), 0.5, 2.0, few, 200).why
