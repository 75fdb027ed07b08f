"""The simulated engines' live traffic (issue 23): SGLang's histograms and counters through the
soak relay, following each engine's configuration and the canary faults."""

from __future__ import annotations

import pytest
from sim_time import AnswerTimeClock

from orchestrator.analysis.verdict import FAIL, INCONCLUSIVE, PASS, judge_gate
from orchestrator.analysis.window import measure, window_of
from orchestrator.metricproviders.relay_scrape import parse_scrape
from orchestrator_sim.host import live_traffic
from orchestrator_sim.testing import NEW_TAG, RELAY, TARGET
from orchestrator_sim.testing import SimDriver as Sim

PROXY = "proxy-glm53"


SPEED = 12000.0


@pytest.fixture
def make_held(make_sim):
    """A fleet on a clock the window holds while it scrapes: at x12000 a loaded machine's few
    milliseconds per answer would be simulated minutes, and the stamps would not be the scrapes'."""
    def make(**config) -> Sim:
        return make_sim(clock=AnswerTimeClock(SPEED), speed=SPEED, **config)

    return make


@pytest.fixture
def sim(make_held) -> Sim:
    return make_held()


def _window(sim: Sim, ports: dict[str, int], minutes: int):
    """A scrape of each replica every simulated minute (the analysis' poll), `minutes` of them,
    simulated time standing still while they are read: each is stamped at the time it was taken."""
    clock = sim.fleet.clock
    scrapes: dict[str, list] = {r: [] for r in ports}
    for i in range(minutes + 1):
        if i:
            sim.wait_sim(60)
        clock.hold()
        try:
            for r, p in ports.items():
                scrapes[r].append(parse_scrape(sim.relay(p, "GET", "/metrics").text, sim.fleet.now()))
        finally:
            clock.release()
    return {r: window_of(r, scrapes[r]) for r in ports}


def test_serving_engines_show_live_traffic_with_sglang_histograms(sim: Sim) -> None:
    w = _window(sim, {"r1": 8008, "r2": 8009}, 30)
    for r in ("r1", "r2"):
        req = measure("request_rate", w[r])
        assert w[r].seconds >= 1800
        # 20 requests a minute (the window's ends are stamped after each scrape answered: a loaded
        # machine's latency at x12000 is simulated minutes, hence the tolerance)
        assert req.value == pytest.approx(live_traffic.REQ_PER_MIN / 60, rel=0.15)
        tpot = measure("tpot_p50", w[r]).value
        assert tpot == pytest.approx(live_traffic.BASE_TPOT_S, rel=0.08)  # interpolated inside SGLang's buckets
        assert measure("ttft_p50", w[r]).value == pytest.approx(live_traffic.BASE_TTFT_S, rel=0.15)
        assert measure("error_rate", w[r]).value == 0.0
        # the metrics SGLang's recorded page carries beside them: end-to-end latency, tokens
        e2e = live_traffic.BASE_TTFT_S + live_traffic.OUTPUT_TOKENS * live_traffic.BASE_TPOT_S
        assert measure("e2e_p50", w[r]).value == pytest.approx(e2e, rel=0.15)
        assert measure("tpot_mean", w[r]).value == pytest.approx(live_traffic.BASE_TPOT_S, rel=0.1)
        assert measure("generation_tokens_per_request", w[r]).value == pytest.approx(live_traffic.OUTPUT_TOKENS, rel=0.05)
        assert measure("prompt_tokens_per_request", w[r]).value == pytest.approx(live_traffic.PROMPT_TOKENS, rel=0.05)


def test_low_traffic_leaves_too_few_samples(make_held) -> None:
    sim = make_held(faults=["low-traffic"])
    w = _window(sim, {"r1": 8008, "r2": 8009}, 30)
    assert measure("request_rate", w["r2"]).value == pytest.approx(live_traffic.LOW_REQ_PER_MIN / 60, rel=0.1)
    assert judge_gate("tpot_p50", ("r2", "r1"), None, 0.9, w, 200).verdict == INCONCLUSIVE


def test_a_slower_candidate_shows_in_its_tpot_and_r1_is_unchanged(make_held) -> None:
    sim = make_held(faults=["candidate-slower:r2"])
    sim.swap_r2()
    sim.safe_up(NEW_TAG, TARGET, [PROXY])  # proxy-glm53 now pools the new r2
    sim.safe_up(NEW_TAG, TARGET, [RELAY], force_recreate=True)  # :8009 reaches it (inline config: #11900)
    sim.wait(lambda: sim.relay(8009, "GET", "/health").status_code == 200, "relay up")
    w = _window(sim, {"r1": 8008, "r2": 8009}, 30)
    g = judge_gate("tpot_p50", ("r2", "r1"), None, 0.9, w, 200)
    assert g.verdict == FAIL and g.observed == pytest.approx(1.3, rel=0.1)
    assert measure("tpot_p50", w["r1"]).value == pytest.approx(live_traffic.BASE_TPOT_S, rel=0.08)


def test_a_restarted_engine_resets_its_counters() -> None:
    p = live_traffic.profile("sglang serve --prefill-decode-interval 1", {}, None, low_traffic=False)
    label = '{model_name="m"}'

    def text(seconds: float, n: int) -> str:
        acc = live_traffic.Accrued()
        live_traffic.accrue(acc, p, "r2", seconds, [(live_traffic.TPOT, live_traffic.TPOT_BUCKETS, p.tpot_s)])
        return "\n".join(live_traffic.histogram_lines(live_traffic.TPOT, live_traffic.TPOT_BUCKETS, acc, n, label)) + "\n"

    before, after = text(1500.0, 500), text(120.0, 40)
    w = window_of("r2", [parse_scrape(before, 0.0), parse_scrape(after, 60.0)])
    assert w.resets == 1 and measure("tpot_p50", w).samples == 40


def test_profiles_follow_the_engine_flags() -> None:
    pdi1 = live_traffic.profile("sglang serve --prefill-decode-interval 1", {}, None, low_traffic=False)
    pdi2 = live_traffic.profile("sglang serve --prefill-decode-interval 2", {}, None, low_traffic=False)
    assert pdi2.tpot_s / pdi1.tpot_s == pytest.approx(0.63)  # inside the lab's 0.53-0.72x
    assert pdi2.ttft_s / pdi1.ttft_s == pytest.approx(1.015)  # a TTFT cost of at most 2 %
    split = live_traffic.profile("sglang serve --chunked-prefill-size 16384", {"SGLANG_DSA_INDEXER_QSPLIT": "1"}, None,
                                 low_traffic=False)
    assert split.ttft_s < pdi1.ttft_s and split.tpot_s < pdi1.tpot_s
    no_split = live_traffic.profile("sglang serve --chunked-prefill-size 16384", {}, None, low_traffic=False)
    assert no_split.ttft_s == pdi1.ttft_s
    assert live_traffic.profile("x", {}, "candidate-errors", low_traffic=False).error_share == 0.05
    assert live_traffic.profile("x", {}, None, low_traffic=True).req_per_min == live_traffic.LOW_REQ_PER_MIN


def test_pass_verdict_between_equal_replicas_within_a_loose_bound(sim: Sim) -> None:
    w = _window(sim, {"r1": 8008, "r2": 8009}, 20)
    assert w["r2"].replica == "r2" and measure("tpot_p50", w["r2"]).samples >= 200
    assert judge_gate("tpot_p50", ("r2", "r1"), 0.9, 1.1, w, 200).verdict == PASS


def test_live_noise_is_seeded_per_engine_slot_and_minute() -> None:
    """The same slot and minutes give the same histograms (a run's readout is reproducible); another
    slot has its own minutes; `live-noise` spreads the minutes' medians wider than the calm mix."""
    hists = [(live_traffic.TPOT, live_traffic.TPOT_BUCKETS, live_traffic.BASE_TPOT_S)]

    def per_minute_mass(key: str, live_noise: bool) -> list[float]:
        p = live_traffic.profile("x", {}, None, low_traffic=False, live_noise=live_noise)
        acc, out, before = live_traffic.Accrued(), [], None
        for m in range(1, 31):
            live_traffic.accrue(acc, p, key, m * 60.0, hists)
            now = list(acc.buckets[live_traffic.TPOT])
            if before is not None:
                out.append(sum(b - a for a, b in zip(before, now)))  # the minute's mass below every bound
            before = now
        return out

    assert per_minute_mass("r2", False) == per_minute_mass("r2", False)
    assert per_minute_mass("r2", False) != per_minute_mass("r1", False)

    def spread(xs: list[float]) -> float:
        mean = sum(xs) / len(xs)
        return (sum((x - mean) ** 2 for x in xs) / len(xs)) ** 0.5

    assert spread(per_minute_mass("r2", True)) > 3 * spread(per_minute_mass("r2", False))


def test_a_build_without_the_abort_counter_exports_none() -> None:
    assert not live_traffic.profile("x", {}, "no-abort-counter", low_traffic=False).aborts_exported
    assert live_traffic.profile("x", {}, None, low_traffic=False).aborts_exported
    slower = live_traffic.profile("sglang serve --prefill-decode-interval 2", {}, "candidate-slower", low_traffic=False)
    assert slower.tpot_s == pytest.approx(live_traffic.BASE_TPOT_S * 1.3)  # whatever its flags
    assert slower.ttft_s == pytest.approx(live_traffic.BASE_TTFT_S * 1.3)
