"""A rollback on the page and in `GET /runs` (orchestrator/teamserver/pages.py): its
tag is the one it goes back to (as `orchestrate runs` says), its page has the host panel and says
what it waits for, and the DONE rollout it undoes is not shown healthy beside it."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from starlette.testclient import TestClient

from helpers_server import AUTH, BASE_URL, TOKEN, sim_settings, wait_for
from orchestrator.teamserver.app import create_app

ROLLOUT = {"action": "rollout", "host": "gpu02", "tag": "v0.0.300", "yes": True, "soak": "0"}


SPEED = 1000.0  # simulated seconds per real second, for the fleet and the server's runs alike
#: the old r2's cold start in the rollback (within the runbook's 50 min): its heartbeats say what it
#: waits for from 5 min in until it is ready, 2.4 s of real time whatever the machine's load
ROLLBACK_COLD_START_S = 45 * 60.0


@pytest.mark.e2e
def test_a_rollback_shows_the_tag_it_returns_to_its_host_and_what_it_waits_for(tmp_path):
    from orchestrator.hosts.clients.retry import RetryPolicy
    from orchestrator.service.session import Session
    from orchestrator.util.clock import ScaledClock
    from orchestrator_sim import SimConfig, SimFleet

    def session_factory(settings):
        return Session.open(settings, clock=ScaledClock(SPEED), retry=RetryPolicy(deadline_s=900, busy_wait_s=5))

    with SimFleet(SimConfig(speed=SPEED, cold_start_s=600.0)) as fleet:
        settings = sim_settings(fleet, tmp_path / "state")
        app = create_app(settings, token=TOKEN, session_factory=session_factory)
        with TestClient(app, base_url=BASE_URL) as c:
            first = c.post("/runs", json=ROLLOUT, headers=AUTH).json()["run_id"]
            wait_for(lambda: c.get(f"/runs/{first}", headers=AUTH).json().get("outcome") == "DONE", "the rollout to end DONE")
            fleet.host.cold_start_s = ROLLBACK_COLD_START_S
            back = c.post("/runs", json={"action": "rollback", "host": "gpu02", "yes": True}, headers=AUTH).json()["run_id"]
            # mid-rollback: the host panel, and what the step waits for
            mid = wait_for(lambda: (t := c.get(f"/ui/fragments/runs/{back}", headers=AUTH).text)
                           and 'data-terminal="0"' in t and "waiting for:" in t and t, "the rollback to wait on a gate",
                           interval=0.01)
            assert re.search(r'<li class="replica [a-z-]+" data-replica="r2"><b>r2</b>', mid), mid
            assert re.search(r'<li class="replica [a-z-]+" data-replica="r1"><b>r1</b>', mid), mid
            listing = c.get("/ui/fragments/runs", headers=AUTH).text
            row = re.search(rf'<tr class="[^"]*"><td><a href="/ui/runs/{first}">.*?</tr>', listing).group(0)
            assert 'class="superseded"' in row and f"DONE, then rollback running: {back}" in row, row
            done = wait_for(lambda: (t := c.get(f"/ui/fragments/runs/{back}", headers=AUTH).text)
                            and 'data-terminal="1"' in t and t, "the rollback to end")
            assert 'data-outcome="ROLLED_BACK"' in done
            assert 'data-field="tag">v0.0.290 (back from v0.0.300)<' in done
            assert '<li class="replica old-serving" data-replica="r2"><b>r2</b> previous serving (rolled back)' in done
            runs = {r["run_id"]: r for r in c.get("/runs", headers=AUTH).json()["runs"]}
            assert runs[back]["target_tag"] == "v0.0.290" and runs[back]["tag"] == "v0.0.300"
            assert runs[first]["target_tag"] == "v0.0.300"
            listing = c.get("/ui/fragments/runs", headers=AUTH).text
            assert re.search(rf'href="/ui/runs/{back}">{back}</a></td><td>gpu02</td><td>rollback</td><td>v0.0.290</td>', listing)
            assert f"DONE, rolled back: {back}" in listing


def test_a_cold_start_shows_its_elapsed_time_and_its_deadline():
    """The runner's last heartbeat of the current step (a cold start) on the page, as the CLI says it."""
    from orchestrator.journal.base import RunRecord
    from orchestrator.language.runbook import load_runbook
    from orchestrator.service.run_info import table_for
    from orchestrator.teamserver.pages import render_run

    t0 = datetime(2026, 12, 1, 22, 0, tzinfo=UTC)
    rb = load_runbook("gpu02-glm53-w4afp8-long-context")
    run = RunRecord("r", "gpu02", rb.name, "v0.0.300", "rollback", "rollback-r2.cold-start-old", False, None, None,
                    {"replicas": ["r2", "r1"]}, t0, t0, None)
    table = table_for(run, rb)
    passed = ["rollback-r2.relay-stop", "rollback-r2.stop-new", "rollback-r2.dry-run-old", "rollback-r2.up-old"]
    passed = [s for s in table.order if s.startswith("preflight") or s in passed]
    nxt = passed[1:] + ["rollback-r2.cold-start-old"]
    d = {"run_id": "r", "host": "gpu02", "kind": "rollback", "tag": "v0.0.300", "target_tag": "v0.0.290", "runbook": rb.name,
         "state": "rollback-r2.cold-start-old", "outcome": None, "message": None, "terminal": False,
         "created_at": t0.isoformat(), "updated_at": t0.isoformat(), "now": (t0 + timedelta(minutes=30)).isoformat(),
         "transitions": [{"seq": i, "from": s, "event": "ok", "to": nxt[i], "at": t0.isoformat(), "note": None}
                         for i, s in enumerate(passed)],
         "worker": {"events": [{"seq": 1, "event": "step_started", "state": "rollback-r2.cold-start-old"},
                               {"seq": 2, "event": "heartbeat", "what": "model-sg-glm53-fp8-tp4-r2 ready line",
                                "elapsed": 1516.0, "timeout": 3000.0}]}}
    html = render_run(d, table, set(), operator=True)
    assert "waiting for: model-sg-glm53-fp8-tp4-r2 ready line, 25 min 16 s / 50 min 00 s" in html, html
    assert '<li class="replica cold-starting" data-replica="r2"><b>r2</b> previous cold-starting' in html
    assert '<li class="replica new-serving" data-replica="r1"><b>r1</b> new serving, not yet rolled back' in html
    assert 'data-field="tag">v0.0.290 (back from v0.0.300)<' in html
