"""The `analysis:` step's handler (steps/analysis.py) against a scripted runtime: the window is
polled, the verdict maps to ok / fail / halt, unreadable relays and a candidate that stops
serving fail it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.engine.steps import handler_for
from orchestrator.language.machine import Event
from orchestrator.language.runbook import Step
from orchestrator_sim.host import live_traffic

LABEL = '{model_name="m"}'


def text(acc: live_traffic.Accrued, rate: float, tpot_s: float, n: int, aborted: int = 0) -> str:
    """The /metrics of an engine that has served `n` requests at `rate` a minute (the simulator's
    histograms, its calm minute-to-minute noise included)."""
    prof = live_traffic.Profile(live_traffic.BASE_TTFT_S, tpot_s, 0.0, rate)
    live_traffic.accrue(acc, prof, "r", n * 60.0 / rate, [(live_traffic.TPOT, live_traffic.TPOT_BUCKETS, tpot_s)])
    lines = ["# TYPE sglang:num_requests_total counter", f"sglang:num_requests_total{LABEL} {n}",
             "# TYPE sglang:num_aborted_requests_total counter", f"sglang:num_aborted_requests_total{LABEL} {aborted}"]
    lines += live_traffic.histogram_lines(live_traffic.TPOT, live_traffic.TPOT_BUCKETS, acc, n - aborted, LABEL)
    return "\n".join(lines) + "\n"


@dataclass
class Clock:
    t: float = 0.0

    def monotonic(self) -> float:
        return self.t

    async def sleep(self, s: float) -> None:
        self.t += s


@dataclass
class Relay:
    rt: FakeRt
    port: int

    async def metrics_text(self) -> str:
        return self.rt.serve(self.port)


@dataclass
class FakeRt:
    """per port: requests per minute and TPOT median; `broken`: ports that answer with an error."""

    rates: dict[int, tuple[float, float]]
    broken: set[int] = field(default_factory=set)
    stops_serving_at: float | None = None
    clock: Clock = field(default_factory=Clock)
    scrapes: int = 0
    accrued: dict[int, live_traffic.Accrued] = field(default_factory=dict)
    run: Any = field(default_factory=lambda: SimpleNamespace(host="gpu02"))

    def serve(self, port: int) -> str:
        if port in self.broken:
            raise ConnectionError(f"relay :{port} refused")
        self.scrapes += 1
        rate, tpot = self.rates[port]
        return text(self.accrued.setdefault(port, live_traffic.Accrued()), rate, tpot, int(1000 + rate * self.clock.t / 60))

    async def watch_engines(self) -> dict[str, Any]:
        return {"r2-engine": ("id", 100.0)}

    async def engines_still_serving(self, watched: dict[str, Any]) -> str | None:
        if self.stops_serving_at is not None and self.clock.t >= self.stops_serving_at:
            return "r2-engine restarted (docker/ps: Up 3 seconds)"
        return None

    async def ensure_env(self) -> dict[str, str]:
        return {"PROXY_TOKEN": "t"}

    def relay_client(self, port: int, token: str) -> Relay:
        return Relay(self, port)

    def start_heartbeat(self) -> float:
        return 0.0

    def tick(self, *a: Any, **k: Any) -> None:
        pass

    def emit(self, *a: Any, **k: Any) -> None:
        pass

    def scrub(self, s: str) -> str:
        return s

    async def wait(self, seconds: float | None = None) -> None:
        await self.clock.sleep(seconds or 60.0)


def step(**over: Any) -> Step:
    analysis = {
        "window": "30m", "poll": "1m", "min_samples": 200,
        "relay": {"token_variable": "PROXY_TOKEN", "ports": {"r1": 8008, "r2": 8009}},
        "gates": [{"ratio": {"metric": "tpot_p50", "candidate": "r2", "control": "r1", "max": 0.9}}],
        **over,
    }
    return Step.model_validate({"id": "readout", "say": "r2 against r1", "analysis": analysis})


def run(rt: FakeRt, st: Step):
    return asyncio.run(handler_for(st)(rt, None, st))  # type: ignore[arg-type]


def test_a_faster_candidate_passes_after_the_whole_window_with_the_readout_as_note():
    rt = FakeRt({8008: (20, 0.030), 8009: (20, 0.019)})
    out = run(rt, step())
    assert out.event == Event.OK
    assert out.note.startswith("canary readout: PASS over 30 min")
    assert rt.clock.t >= 1800 and rt.scrapes == 2 * 31  # every poll, both replicas


def test_a_slower_candidate_fails_with_the_readout():
    out = run(FakeRt({8008: (20, 0.030), 8009: (20, 0.042)}), step())
    assert out.event == Event.FAIL and "canary readout: FAIL" in out.note and "r2/r1 = 1.4" in out.note
    assert "wholly outside <= 0.9" in out.note


def test_too_little_traffic_halts_by_default_and_fails_when_the_runbook_says_so():
    low = {8008: (1, 0.030), 8009: (1, 0.019)}
    out = run(FakeRt(low), step())
    assert out.event == Event.HALT and "neither promoted nor rolled back" in out.note
    assert "INCONCLUSIVE: tpot_p50 r2/r1 <= 0.9: not enough traffic: r2 served 30" in out.note
    assert run(FakeRt(low), step(not_enough_traffic="fail")).event == Event.FAIL


def test_a_relay_unreadable_three_polls_in_a_row_fails_and_two_do_not():
    rt = FakeRt({8008: (20, 0.030), 8009: (20, 0.019)}, broken={8008})
    out = run(rt, step())
    assert out.event == Event.FAIL and "r1's metrics (relay :8008) could not be read 3 times" in out.note
    assert rt.clock.t == pytest.approx(120)

    class Blip(FakeRt):
        def serve(self, port: int) -> str:
            if port == 8008 and 60 <= self.clock.t <= 120:
                raise ConnectionError("blip")
            return super().serve(port)

    assert run(Blip({8008: (20, 0.030), 8009: (20, 0.019)}), step()).event == Event.OK


def test_a_candidate_that_stops_serving_fails_at_once():
    rt = FakeRt({8008: (20, 0.030), 8009: (20, 0.019)}, stops_serving_at=600)
    out = run(rt, step())
    assert out.event == Event.FAIL and "during the analysis: r2-engine restarted" in out.note
    assert rt.clock.t < 700


def test_the_heartbeat_shows_the_gates_on_the_window_so_far():
    from orchestrator.engine.steps.analysis import so_far

    class Ticking(FakeRt):
        lines: list[str] = []

        def tick(self, what: str, started: float, timeout: Any, extra: Any = None) -> None:
            if self.clock.t >= 900 and not self.lines:
                self.lines.append(extra()["so_far"])

    rt = Ticking({8008: (20, 0.030), 8009: (20, 0.042)})
    run(rt, step())
    assert rt.lines and rt.lines[0].startswith("tpot_p50 r2/r1 1.4")  # the point so far: the verdict is the window's
    assert so_far(step().analysis, {"r1": [], "r2": []}) == "tpot_p50: not known yet"  # type: ignore[arg-type]


def test_an_unknown_series_halts_with_the_readout_never_a_pass():
    """The candidate's engine exports no abort counter: its completion is unknown, not 100 %."""

    class NoAborts(FakeRt):
        def serve(self, port: int) -> str:
            out = super().serve(port)
            if port == 8009:
                out = "\n".join(x for x in out.splitlines() if "num_aborted" not in x) + "\n"
            return out

    st = step(gates=[{"ratio": {"metric": "tpot_p50", "candidate": "r2", "control": "r1", "max": 0.9}},
                     {"min": {"metric": "completion_rate", "replica": "r2", "value": 0.99}}])
    out = run(NoAborts({8008: (20, 0.030), 8009: (20, 0.019)}), st)
    assert out.event == Event.HALT and "canary readout: INCONCLUSIVE" in out.note
    assert "r2's /metrics carries no sglang:num_aborted_requests_total: unknown, not zero" in out.note
