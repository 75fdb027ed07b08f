"""The explorer's doors (orchestrator_sim/explore_doors.py, issue 21) on a fixed, small budget: a
rollback stalled between its checks and its run while gpu03 moves (seed 3), and a superseded run
resumed through `--server` (seed 4). `python -m orchestrator_sim.explore_doors --seeds A-B` runs more."""

from __future__ import annotations

import pytest

from orchestrator_sim import explore_doors

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("seed", [3, 4])
def test_door_schedule_holds_every_invariant(seed):
    out = explore_doors.run_door(seed)
    assert out.violations == [], (out.door.describe(), out.commands, out.violations)
    assert out.commands, "the schedule ran no command"


def test_the_doors_draw_every_scenario():
    assert {explore_doors.draw(s).scenario for s in range(20)} == set(explore_doors.SCENARIOS)
