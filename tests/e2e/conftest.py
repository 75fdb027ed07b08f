"""End-to-end: the real orchestrator against the simulated gpu02 over loopback sockets."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

SPEED = 3000.0  # simulated seconds per real second: a 50-minute cold start takes one second


@dataclass
class E2E:
    fleet: object
    session: object
    state_dir: Path


@pytest.fixture
def e2e_factory(tmp_path):
    from orchestrator.hosts.clients.retry import RetryPolicy
    from orchestrator.service.demo import demo_settings
    from orchestrator.service.session import Session
    from orchestrator.util.clock import ScaledClock
    from orchestrator_sim import SimConfig, SimFleet

    opened = []

    def make(*faults: str, hosts: tuple[str, ...] = ("gpu02",), **config: object) -> E2E:
        # config: more SimConfig fields (e.g. log_lines=None: every engine's whole log, whatever
        # ORCHESTRATOR_SIM_LOG_LINES says)
        fleet = SimFleet(SimConfig(speed=SPEED, faults=list(faults), cold_start_s=1200, hosts=hosts, **config))
        fleet.__enter__()
        state = tmp_path / f"state{len(opened)}"
        state.mkdir()
        settings = demo_settings(fleet, state)
        session = Session.open(settings, clock=ScaledClock(SPEED), retry=RetryPolicy(deadline_s=900, busy_wait_s=5))
        e = E2E(fleet, session, state)
        opened.append(e)
        return e

    yield make
    for e in opened:
        e.session.close()
        e.fleet.__exit__(None, None, None)


@pytest.fixture
def rehearsals(tmp_path: Path, monkeypatch):
    """Rollouts on simulated hosts run to their end in-process (tests/e2e/rehearsal.py)."""
    from rehearsal import Rehearsals

    r = Rehearsals(tmp_path, monkeypatch)
    yield r
    r.close()
