"""The app's Prometheus registry. `orchestrator_runs` comes from a `Snapshot` refreshed in a worker
thread at most once per `max_age` seconds, by one refresh at a time: a scrape never reads the
journal on the event loop, and waits at most `WAIT_S` for a refresh.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import anyio.to_thread
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

#: Bucket bounds of the gate-wait histogram, in seconds: from a quick check to a 2-hour soak.
GATE_WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 5400, 7200, 10800)
#: `orchestrator_runs` label values: unfinished runs split by whether a live lease holds them.
RUN_STATES = ("RUNNING", "INTERRUPTED", "DONE", "ROLLED_BACK", "HALTED", "ABORTED")
WAIT_S = 5.0

T = TypeVar("T")


class Snapshot(Generic[T]):
    """A value read in a thread, cached `max_age` seconds, refreshed by one reader at a time."""

    def __init__(self, read: Callable[[], T], *, max_age: float,
                 on_error: Callable[[BaseException], None] | None = None) -> None:
        self._read = read
        self.max_age = max_age
        self._on_error = on_error
        self.value: T | None = None
        self.ok = False
        self.at: float | None = None
        self._inflight: asyncio.Future[None] | None = None

    def invalidate(self) -> None:
        self.at = None

    async def get(self) -> tuple[T | None, bool]:
        if self.at is None or time.monotonic() - self.at >= self.max_age:
            if self._inflight is None or self._inflight.done():
                self._inflight = asyncio.ensure_future(self._refresh())
            try:
                await asyncio.wait_for(asyncio.shield(self._inflight), WAIT_S)
            except TimeoutError:
                pass  # answer with the last value; the refresh goes on
        return self.value, self.ok

    async def _refresh(self) -> None:
        try:
            self.value = await anyio.to_thread.run_sync(self._read)
            self.ok = True
        except Exception as exc:  # noqa: BLE001 - a reader must answer even with the journal down
            self.ok = False
            if self._on_error is not None:
                self._on_error(exc)
        finally:
            self.at = time.monotonic()


class Metrics:
    """Process-local counters plus the journal snapshot's gauges."""

    def __init__(self, active_count: Callable[[], int], census: Callable[[], dict[str, int]], *,
                 max_age: float, on_error: Callable[[BaseException], None] | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.gate_wait = Histogram(
            "orchestrator_gate_wait_seconds",
            "Time a run spent in one state (its step and gate) before its transition, by step kind.",
            ["kind"], buckets=GATE_WAIT_BUCKETS, registry=self.registry,
        )
        self.effects = Counter(
            "orchestrator_effects",  # exposed as orchestrator_effects_total
            "Journaled effects (calls to compose-manager) of runs this server executed, by kind and outcome status.",
            ["kind", "outcome"], registry=self.registry,
        )
        self.active = Gauge("orchestrator_server_active_runs", "Runs executing in this server now.",
                            registry=self.registry)
        self.active.set_function(active_count)
        self.snapshot: Snapshot[dict[str, int]] = Snapshot(census, max_age=max_age, on_error=on_error)
        self.registry.register(_JournalRuns(self.snapshot))

    async def render(self) -> bytes:
        await self.snapshot.get()
        return generate_latest(self.registry)


class _JournalRuns:
    """`orchestrator_runs{state}` and `orchestrator_journal_up` from the last snapshot (no I/O)."""

    def __init__(self, snapshot: Snapshot[dict[str, int]]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Any:
        counts, ok = self.snapshot.value, self.snapshot.ok
        if ok and counts is not None:
            runs = GaugeMetricFamily(
                "orchestrator_runs",
                "Runs in the journal by state: RUNNING (a live lease holds it), INTERRUPTED (unfinished, no live "
                "lease: `orchestrate resume` it) or its outcome.",
                labels=["state"],
            )
            for state in RUN_STATES:
                runs.add_metric([state], counts.get(state, 0))
            yield runs
        yield GaugeMetricFamily("orchestrator_journal_up", "1 if the last journal read succeeded.",
                                value=1.0 if ok else 0.0)
