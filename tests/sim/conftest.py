"""Fixtures for the simulator's own tests: fast SimFleets driven with plain httpx."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from orchestrator_sim import SimConfig, SimFleet
from orchestrator_sim.testing import SimDriver


@pytest.fixture
def make_sim() -> Iterator[Callable[..., SimDriver]]:
    """A factory of running fleets (speed x12000, 10-minute cold start unless told otherwise;
    `clock`: the fleet's clock, e.g. a tests/sim_time.AnswerTimeClock the test holds)."""
    fleets: list[SimFleet] = []
    clients: list[httpx.Client] = []

    def make(clock: Any = None, **config: Any) -> SimDriver:
        cfg = SimConfig(**{"speed": 12000.0, "cold_start_s": 600.0, "seed": 7, **config})
        fleet = SimFleet(cfg, **({"clock": clock} if clock is not None else {}))
        fleet.start()
        fleets.append(fleet)
        client = httpx.Client(timeout=30.0)
        clients.append(client)
        return SimDriver(fleet, client)

    yield make
    for c in clients:
        c.close()
    for f in fleets:
        f.stop()


@pytest.fixture
def sim(make_sim: Callable[..., SimDriver]) -> SimDriver:
    return make_sim()
