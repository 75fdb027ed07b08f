"""A `watch:` whose metric the watched replica does not carry (orchestrator/engine/executor/watch.py):
unknown, never within its bounds. `on_unknown: fail` (the default) fails the step naming the missing
series; `on_unknown: note` says so once and goes on watching what it can see."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from orchestrator.analysis.metric_defs import ABORTED, QUEUE, REQUESTS
from orchestrator.analysis.watch_spec import WatchSpec
from orchestrator.analysis.window import Scrape
from orchestrator.engine.executor.watch import breach, unknown, watch


def _spec(**kw: Any) -> WatchSpec:
    base = {"replica": "r1", "relay": {"token_variable": "T", "port": 8008}, "poll": "30s", "window": "5m",
            "min_samples": 20, "max": {"error_rate": 0.02, "queue_depth_max": 8}}
    return WatchSpec(**{**base, **kw})


def _text(requests: int, aborted: int | None, queue: int = 0) -> str:
    lines = ["# TYPE sglang:num_requests_total counter", f'sglang:num_requests_total{{model_name="m"}} {requests}',
             "# TYPE sglang:num_queue_reqs gauge", f'sglang:num_queue_reqs{{model_name="m"}} {queue}']
    if aborted is not None:
        lines += ["# TYPE sglang:num_aborted_requests_total counter",
                  f'sglang:num_aborted_requests_total{{model_name="m"}} {aborted}']
    return "\n".join(lines) + "\n"


@dataclass
class Clock:
    t: float = 0.0

    def monotonic(self) -> float:
        return self.t


@dataclass
class Log:
    warnings: list[dict[str, Any]] = field(default_factory=list)

    def warning(self, event: str, **kw: Any) -> None:
        self.warnings.append({"event": event, **kw})


@dataclass
class FakeRt:
    """Serves `texts` in turn through the relay, one per poll; the clock moves by the poll."""

    texts: list[str]
    clock: Clock = field(default_factory=Clock)
    log: Log = field(default_factory=Log)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    async def ensure_env(self) -> dict[str, str]:
        return {"T": "t"}

    def relay_client(self, port: int, token: str) -> Any:
        rt = self

        class Client:
            async def metrics_text(self) -> str:
                return rt.texts.pop(0)

        return Client()

    async def wait(self, seconds: float) -> None:
        self.clock.t += seconds

    def emit(self, kind: str, **fields: Any) -> None:
        self.events.append((kind, fields))

    def scrub(self, text: str) -> str:
        return text


def test_a_metric_the_replica_does_not_carry_is_unknown_not_within_bounds():
    spec = _spec()
    no_aborts = [Scrape(0, counters={REQUESTS: 100}, gauges={QUEUE: 0}), Scrape(30, counters={REQUESTS: 200}, gauges={QUEUE: 0})]
    assert breach(spec, no_aborts) is None  # nothing crossed ...
    assert unknown(spec, no_aborts) == {"error_rate": f"r1's /metrics carries no {ABORTED}"}  # ... and nothing seen
    partial = [Scrape(0, counters={REQUESTS: 100}, gauges={QUEUE: 0}),
               Scrape(30, counters={REQUESTS: 200, ABORTED: 0}, gauges={QUEUE: 0})]
    assert unknown(spec, partial) == {"error_rate": f"r1's /metrics carried {ABORTED} in only part of the window"}
    seen = [Scrape(0, counters={REQUESTS: 100, ABORTED: 0}, gauges={QUEUE: 0}),
            Scrape(30, counters={REQUESTS: 200, ABORTED: 0}, gauges={QUEUE: 0})]
    assert unknown(spec, seen) == {}


def test_by_default_an_unknown_metric_fails_the_watch_naming_the_series():
    rt = FakeRt([_text(100, None), _text(200, None)])
    found = asyncio.run(watch(rt, _spec()))  # type: ignore[arg-type]
    assert found == (f"r1 error_rate is unknown (r1's /metrics carries no {ABORTED}): a watch that cannot see it "
                     f"does not watch it (on_unknown: fail)")


def test_with_on_unknown_note_it_is_said_once_and_the_rest_is_still_watched():
    # no abort counter for three polls, then the queue breaches: the watch went on judging the queue
    rt = FakeRt([_text(100, None), _text(200, None), _text(300, None), _text(400, None, queue=9)])
    found = asyncio.run(watch(rt, _spec(on_unknown="note")))  # type: ignore[arg-type]
    assert found is not None and "r1 queue_depth_max = 9" in found
    notes = [f["text"] for k, f in rt.events if k == "note"]
    assert notes == [f"watch on r1: error_rate is unknown (r1's /metrics carries no {ABORTED}): not watched "
                     f"(on_unknown: note)"]
    assert [w["metric"] for w in rt.log.warnings] == ["error_rate"]


def test_plan_says_what_an_unknown_metric_does():
    assert "is unknown, never within bounds: it fails the step" in _spec().describe()
    assert "it is noted and not watched" in _spec(on_unknown="note").describe()
    with pytest.raises(ValueError, match="on_unknown"):
        _spec(on_unknown="ignore")
