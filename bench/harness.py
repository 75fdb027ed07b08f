"""Running the real orchestrator against in-process simulated fleets, instrumented.

`SimRun` is one simulated gpu02 (a `SimFleet` with `SimEvents` attached) plus one orchestrator
`Session` on its own state directory (SQLite journal, inventory, run log), both on the SAME clock
object, so executor stamps and simulator stamps are on one time axis. `rollout()` runs a full
rollout through `admission.new_rollout` + `runner.execute`, exactly as `orchestrate rollout` does;
several `SimRun`s can run concurrently in one event loop (`asyncio.gather`).

`fixed=True` applies the two simulator fixes of bench/sim_fixes.py for the fleet's whole life;
False leaves the simulator as shipped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.hosts.clients.retry import RetryPolicy
from orchestrator.journal.base import RunRecord
from orchestrator.language.machine import Table
from orchestrator.language.runbook import DEFAULT_RUNBOOK, Runbook
from orchestrator.service.admission import new_rollout
from orchestrator.service.demo import DEMO_HOST, DEMO_TAG, demo_settings
from orchestrator.service.runner import execute
from orchestrator.service.session import Session
from orchestrator_sim import SimConfig, SimFleet

from bench.http_timing import HttpTimings, fleet_ports
from bench.sim_events import SimEvents
from bench.sim_fixes import simulator_fixes
from bench.timed_progress import TimedProgress

POLL_INTERVAL_S = 10.0  # the production default (Settings.poll_interval)


@dataclass
class RunOutcome:
    final: RunRecord
    progress: TimedProgress
    real_start: float
    real_end: float
    sim_start: float
    sim_end: float
    thread_cpu_s: float  # CPU of the thread that ran the executor (the orchestrator alone when run serially)
    calls: list[Any] = field(default_factory=list)
    events: list[Any] = field(default_factory=list)
    http: list[Any] = field(default_factory=list)  # HttpTiming of this run's requests (client side)

    @property
    def real_s(self) -> float:
        return self.real_end - self.real_start

    @property
    def sim_s(self) -> float:
        return self.sim_end - self.sim_start


class SimRun:
    def __init__(self, state_dir: Path, *, speed: float, cold_start_s: float, faults: list[str] | None = None,
                 seed: int | None = None, clock: Any = None, poll_interval: float = POLL_INTERVAL_S,
                 fixed: bool = False, log_probe_interval: float | None = None) -> None:
        self.state_dir = Path(state_dir)
        self._fixes = simulator_fixes(nodelay=fixed, tick=fixed)
        self._fixes.__enter__()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.speed = speed
        self.fleet = SimFleet(SimConfig(speed=speed, cold_start_s=cold_start_s, faults=list(faults or []), seed=seed))
        if clock is not None:  # one clock object for the simulator and the orchestrator
            self.fleet.clock = clock
            self.fleet.host.clock = clock
        self.clock = self.fleet.clock
        self.events = SimEvents.attach(self.fleet)
        self.poll_interval = poll_interval
        self.log_probe_interval = log_probe_interval  # None: the settings' default; 0: no probes (before issue 25)
        self.session: Session | None = None

    def __enter__(self) -> SimRun:
        self.fleet.__enter__()
        settings = demo_settings(self.fleet, self.state_dir)
        settings.poll_interval = self.poll_interval
        if self.log_probe_interval is not None:
            settings.log_probe_interval = self.log_probe_interval
        self.session = Session.open(settings, clock=self.clock, retry=RetryPolicy(deadline_s=900, busy_wait_s=5))
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if self.session is not None:
                self.session.close()
            self.fleet.__exit__(None, None, None)
        finally:
            self._fixes.__exit__(None, None, None)

    def new_run(self) -> tuple[RunRecord, Runbook, Table]:
        assert self.session is not None
        return new_rollout(self.session, DEMO_HOST, DEMO_TAG, DEFAULT_RUNBOOK)

    async def execute(self, run: RunRecord, rb: Runbook, table: Table, *, soak: float | None = None,
                      progress: TimedProgress | None = None) -> RunOutcome:
        assert self.session is not None
        with HttpTimings():
            out = await execute_timed(self.session, self.clock, run, rb, table, soak=soak, progress=progress)
        out.calls = self.fleet.calls
        out.events = self.events.snapshot()
        out.http = HttpTimings.for_ports(fleet_ports(self.fleet.urls), out.real_start, out.real_end)
        return out

    async def rollout(self, *, soak: float | None = None) -> RunOutcome:
        run, rb, table = self.new_run()
        return await self.execute(run, rb, table, soak=soak)


async def execute_timed(session: Session, clock: Any, run: RunRecord, rb: Runbook, table: Table, *,
                        soak: float | None = None, progress: TimedProgress | None = None) -> RunOutcome:
    """`runner.execute` with `--yes`, timed on the real clock and on `clock` (the simulator's time)."""
    progress = progress or TimedProgress(clock)
    cpu0 = time.thread_time()
    real0, sim0 = time.monotonic(), clock.monotonic()
    final = await execute(session, run, rb, table, progress=progress, yes=True, soak=soak)
    real1, sim1 = time.monotonic(), clock.monotonic()
    cpu1 = time.thread_time()
    return RunOutcome(final, progress, real0, real1, sim0, sim1, cpu1 - cpu0)


class RemoteSimClock:
    """The clock of a simulator in another process: `(time.monotonic() - origin) * speed`.

    CLOCK_MONOTONIC is system-wide on Linux, so this is the simulator's own time, read here."""

    def __init__(self, origin: float, speed: float) -> None:
        self.origin = origin
        self.speed = speed

    def monotonic(self) -> float:
        return (time.monotonic() - self.origin) * self.speed

    def real_seconds(self, seconds: float) -> float:
        return seconds / self.speed

    async def sleep(self, seconds: float) -> None:
        import asyncio

        await asyncio.sleep(max(0.0, seconds) / self.speed)
