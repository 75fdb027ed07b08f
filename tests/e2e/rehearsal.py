"""One rollout on simulated hosts, run to its end in-process on one simulated time (the answer-time
clock: it stands still while the simulator answers and while the orchestrator computes, so a
canary window holds its polls however loaded the machine is). The canary and procedure end-to-end
tests share it through the `rehearsals` fixture (tests/e2e/conftest.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from recording import RecordingProgress
from sim_time import AnswerTimeClock


@dataclass
class Rehearsal:
    fleet: Any  # orchestrator_sim.SimFleet
    final: Any  # the run as it ended (journal.base.RunRecord)
    r1_before: Any  # the control's container before the run (None when the host has no such service)
    progress: RecordingProgress
    session: Any  # service.session.Session
    clock: AnswerTimeClock  # shared by the simulator and the session

    def within(self, work: Callable[[], Awaitable[Any]]) -> Any:
        """`work()` awaited on its own event loop (the clock's), through a transport of that loop."""
        async def go() -> Any:
            self.session.transport = transport = self.clock.transport()
            try:
                return await work()
            finally:
                await transport.close()

        return self.clock.run(go())


class Rehearsals:
    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tmp_path, self.monkeypatch = tmp_path, monkeypatch
        self.opened: list[tuple[Any, Any]] = []

    def run(self, *faults: str, runbook: str, tag: str, host: str = "gpu02", r1: str = "", speed: float = 3000.0,
            wall: datetime | None = None, yes: bool = True, cold_start_s: float = 1200,
            initial: str | None = "long-context", hosts: tuple[str, ...] | None = None,
            human: Callable[..., Awaitable[Any]] | None = None, operator: bool = False) -> Rehearsal:
        """`runbook` at `tag` on `host` with `faults`; `wall`: the quiet window's wall clock (a run
        must not depend on when CI runs); `human(session, run_id, progress, fleet)` runs beside it;
        `operator`: the demo's operator makes the env-map edits a `manual:` step asks for."""
        from orchestrator.hosts.clients.retry import RetryPolicy
        from orchestrator.service.admission import new_rollout
        from orchestrator.service.demo import DemoOperator, demo_settings
        from orchestrator.service.runner import execute
        from orchestrator.service.session import Session
        from orchestrator_sim import SimConfig, SimFleet

        if wall is not None:
            import orchestrator.engine.steps.quiet as quiet

            self.monkeypatch.setattr(quiet, "WALL", lambda: wall)
        clock = AnswerTimeClock(speed)
        config = SimConfig(speed=speed, faults=list(faults), cold_start_s=cold_start_s,
                           **({"initial": initial} if initial else {}), **({"hosts": hosts} if hosts else {}))
        fleet = SimFleet(config, clock=clock)
        fleet.__enter__()
        state = self.tmp_path / f"state{len(self.opened)}"
        state.mkdir()
        transport = clock.transport()
        session = Session.open(demo_settings(fleet, state), clock=clock, transport=transport,
                               retry=RetryPolicy(deadline_s=900, busy_wait_s=5))
        self.opened.append((fleet, session))
        r1_before = fleet.hosts[host].container(r1) if r1 else None
        run, rb, table = new_rollout(session, host, tag, runbook)
        progress = RecordingProgress()

        async def go() -> Any:
            beside = asyncio.ensure_future(human(session, run.run_id, progress, fleet)) if human else None
            shown = DemoOperator(fleet, rb, host, inner=progress) if operator else progress
            try:
                return await execute(session, run, rb, table, progress=shown, yes=yes)
            finally:
                if beside is not None:
                    beside.cancel()
                await transport.close()

        final = clock.run(go())
        return Rehearsal(fleet, final, r1_before, progress, session, clock)

    def close(self) -> None:
        for fleet, session in self.opened:
            session.close()
            fleet.__exit__(None, None, None)
