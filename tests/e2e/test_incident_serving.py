"""A replica whose start rotated out of its log, on a host one model-proxy peer stops listing:
the soak relay's route to that replica, up at the time, is live evidence that it serves."""

from __future__ import annotations

import asyncio

import pytest
from recording import RecordingProgress

from orchestrator.language.runbook import DEFAULT_RUNBOOK
from orchestrator_sim.faults import parse_fault

pytestmark = pytest.mark.e2e


class PeerDropsAt(RecordingProgress):
    """peer-b stops listing gpu02 (the simulator's `peer-missing`) once the run enters `state`."""

    def __init__(self, fleet, state: str) -> None:
        super().__init__()
        self.fleet, self.state = fleet, state

    def event(self, kind, **fields):
        super().event(kind, **fields)
        if kind == "transition" and str(fields.get("to", "")).startswith(self.state):
            faults = self.fleet.host.faults
            if not faults.active("peer-missing"):
                faults.specs = (*faults.specs, parse_fault("peer-missing"))


def test_r2s_failed_verify_rolls_back_on_the_relays_word_for_r1(e2e_factory):
    from orchestrator.service.admission import new_rollout
    from orchestrator.service.runner import execute

    e = e2e_factory(log_lines=40)
    run, rb, table = new_rollout(e.session, "gpu02", "v0.0.300", DEFAULT_RUNBOOK)
    progress = PeerDropsAt(e.fleet, "r2.verify")
    final = asyncio.run(execute(e.session, run, rb, table, progress=progress, yes=True))
    assert final.outcome == "ROLLED_BACK", final.message
    r1 = e.fleet.host.container("model-sg-glm53-w4afp8-tp4-r1")
    assert r1.state == "running" and r1.file == "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-Canary.yaml"  # never stopped
    downs = [c.body["services"] for c in e.fleet.calls if c.is_compose_down]
    assert ["model-sg-glm53-w4afp8-tp4-r2"] in downs and not [d for d in downs if "model-sg-glm53-w4afp8-tp4-r1" in d]
    # the relay's :8008 (r1's port) was asked right before the rollback stopped the relay
    calls = e.fleet.calls
    relay_down = max(i for i, c in enumerate(calls) if c.is_compose_down and c.body["services"] == ["glm53-soak-relay"])
    last_other = max(i for i, c in enumerate(calls[:relay_down]) if c.is_compose_down or c.is_compose_up)
    assert [c.path for c in calls[last_other:relay_down] if c.server == "relay:8008"] == ["/health"]
    assert e.fleet.check_invariants() == []
