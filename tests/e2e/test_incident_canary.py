"""A canary whose soak relay ran before the rollout: its rollback stops the relay and does not
start it again, so the last line names it."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.e2e.test_qsplit_canary_e2e import canary  # noqa: F401  (the #302 canary, a fixture)

pytestmark = pytest.mark.e2e

RELAY = "glm53-soak-relay"
LONG = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"


def _operator_up(fleet, services: list[str], tag: str, file: str) -> None:
    """An operator's up through compose-manager (dry run first), outside any run."""
    headers = {"Authorization": f"Bearer {fleet.tokens.compose_manager}"}
    for dry in (True, False):
        body = {"tag": tag, "file": file, "services": services, "env": fleet.dashboard_env, "dry_run": dry}
        r = httpx.post(f"{fleet.urls.compose_manager}/compose/up", json=body, headers=headers, timeout=60)
        done = json.loads(r.text.strip().splitlines()[-1])
        assert done["event"] == "done" and done["success"], r.text


def test_a_rolled_back_canary_names_the_soak_relay_that_ran_before_it(canary, monkeypatch):  # noqa: F811  (the fixture imported above)
    """The #302 canary's relay differs from #294's (its :8010 DCGM route): the canary recreates the
    relay an operator left running, and its rollback stops it without starting #294's again."""
    from orchestrator_sim import SimFleet

    enter = SimFleet.__enter__

    def relay_running_first(self):
        entered = enter(self)
        _operator_up(self, [RELAY], "v0.0.300", LONG)  # the soak relay an operator left running
        return entered

    monkeypatch.setattr(SimFleet, "__enter__", relay_running_first)
    fleet, final, _, progress, _ = canary("memory-squeeze:r2")
    assert final.outcome == "ROLLED_BACK", final.message
    assert any("relay-up" in str(f.get("state")) and f.get("event_name") == "ok" for k, f in progress.events
               if k == "transition")  # the canary recreated the relay from its own file
    relay = fleet.host.container(RELAY)
    assert relay is None or relay.state != "running"  # the rollback stopped the canary's relay
    last = final.message.splitlines()[-1]
    assert (f"{RELAY} ran when the run started and runs no more (this run stopped it and its rollback does not "
            f"start it again): start it again if it is still wanted") in last, last
    assert "look at it" not in last, last
    assert fleet.check_invariants() == []
