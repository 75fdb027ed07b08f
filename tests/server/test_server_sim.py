"""Real rollouts submitted to `orchestrate serve`, against the simulated gpu02 over loopback."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from helpers_server import AUTH, BASE_URL, TOKEN, sim_session_factory, sim_settings, wait_for
from orchestrator.journal import SqliteJournal
from orchestrator.teamserver.app import create_app
from orchestrator.teamserver.remote import remote

pytestmark = pytest.mark.e2e

FAST = {"action": "rollout", "host": "gpu02", "tag": "v0.0.300", "yes": True, "soak": "0"}


@pytest.fixture
def sim_app(sim_fleet, tmp_path):
    made: list[int] = []

    def make(*faults: str) -> tuple[Any, Any, Any]:
        fleet = sim_fleet(*faults)
        settings = sim_settings(fleet, tmp_path / f"state{len(made)}")
        made.append(1)
        return fleet, settings, create_app(settings, token=TOKEN, session_factory=sim_session_factory)

    return make


def secrets_of(fleet, settings) -> list[str]:
    env = getattr(fleet, "dashboard_env", {})
    env = env() if callable(env) else env
    return [v for v in env.values() if len(v) >= 16] + settings.tokens()


def terminal(client, run_id):
    d = client.get(f"/runs/{run_id}", headers=AUTH).json()
    return d if d["terminal"] or (d["worker"] or {}).get("status") in ("failed", "refused") else None


def test_a_soak_waits_for_approve_through_the_api(sim_app):
    fleet, settings, app = sim_app()
    with TestClient(app, base_url=BASE_URL) as c:
        run_id = c.post("/runs", json={**FAST, "yes": False}, headers=AUTH).json()["run_id"]

        def waiting_for_approval():
            d = c.get(f"/runs/{run_id}", headers=AUTH).json()
            assert not d["terminal"], d["message"]
            return d if "orchestrate approve" in ((d["worker"] or {}).get("waiting") or "") else None

        d = wait_for(waiting_for_approval, "the soak's approval gate")
        assert d["approvals"] == []
        assert c.post(f"/runs/{run_id}/approve", json={"gate": "*", "by": "carol"}, headers=AUTH).status_code == 200
        d = wait_for(lambda: terminal(c, run_id), "the rollout to end")
        assert d["outcome"] == "DONE", d["message"]
        assert d["approvals"] == ["*"]
    assert fleet.check_invariants() == []


def test_abort_through_the_api_takes_the_rollback(sim_app):
    fleet, settings, app = sim_app()
    with TestClient(app, base_url=BASE_URL) as c:
        run_id = c.post("/runs", json={**FAST, "yes": False}, headers=AUTH).json()["run_id"]
        wait_for(lambda: "orchestrate approve" in ((c.get(f"/runs/{run_id}", headers=AUTH).json()["worker"] or {})
                                                  .get("waiting") or ""), "the soak's approval gate")
        r = c.post(f"/runs/{run_id}/abort", json={}, headers=AUTH)
        assert r.status_code == 200 and r.json()["runner"] is not None
        d = wait_for(lambda: terminal(c, run_id), "the rollback to end")
    assert "abort" in [t["event"] for t in d["transitions"]]
    assert d["outcome"] == "ROLLED_BACK", d["message"]
    assert fleet.check_invariants() == []


# --------------------------------------------------------------------------- the client side


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_a_rollout_submitted_over_http_runs_to_done_and_the_client_follows_it(sim_app, live_server, capsys):
    fleet, settings, app = sim_app()
    url = live_server(app)
    rc = remote(url, TOKEN, "rollout", {"host": "gpu02", "tag": "v0.0.300", "runbook": None, "yes": True, "soak": "0"},
                as_json=True, interval=0.2)
    out = capsys.readouterr().out
    events = json_lines(out)
    assert rc == 0, out
    assert events[0]["event"] == "submitted"
    run_id = events[0]["run_id"]
    transitions = [e for e in events if e["event"] == "transition"]
    assert [t["seq"] for t in transitions] == list(range(1, len(transitions) + 1))  # each once, in order
    assert transitions[-1]["to"] == "DONE"
    assert events[-1] == {**events[-1], "event": "summary", "run_id": run_id, "outcome": "DONE"}
    for secret in secrets_of(fleet, settings):
        assert secret not in out

    # what the server shows of it
    with httpx.Client(base_url=url, headers=AUTH) as c:
        d = c.get(f"/runs/{run_id}").json()
        text = c.get(f"/runs/{run_id}").text
        metrics = c.get("/metrics").text
        health = c.get("/healthz").json()
    assert d["outcome"] == "DONE" and d["worker"]["status"] == "finished" and d["lease"] is None  # released
    assert [t["seq"] for t in d["transitions"]] == [t["seq"] for t in transitions]
    ups = [e for e in d["effects"] if e["kind"] == "compose_up" and e["mutating"]]
    assert ups and all(e["outcome"]["status"] == "success" for e in ups)
    for secret in secrets_of(fleet, settings):
        assert secret not in text
    assert 'orchestrator_runs{state="DONE"} 1.0' in metrics
    assert f'orchestrator_effects_total{{kind="compose_up",outcome="success"}} {float(len(ups))}' in metrics
    assert 'orchestrator_gate_wait_seconds_count{kind="logs"}' in metrics
    assert health == {"status": "ok"}
    assert fleet.check_invariants() == []

    # the other remote actions against the same server
    assert remote(url, TOKEN, "status", {"run_id": run_id}, as_json=False) == 0
    assert f"run {run_id} rollout of gpu02 to v0.0.300: DONE" in capsys.readouterr().out
    assert remote(url, TOKEN, "approve", {"run_id": run_id, "gate": "*"}, as_json=False) == 2
    assert "already ended DONE" in capsys.readouterr().err
    assert remote(url, "wrong-token-" + "0" * 30, "runs", {}, as_json=False) == 2
    assert "ORCHESTRATOR_SERVER_TOKEN" in capsys.readouterr().err
    assert remote(url, TOKEN, "rollout", {"host": "gpu02", "tag": "v1"}, as_json=False) == 2
    assert "malformed" in capsys.readouterr().err


def test_remote_returns_the_outcomes_exit_code(sim_app, capsys):
    fleet, settings, app = sim_app("oom")
    rc = remote("http://127.0.0.1", TOKEN, "rollout", {"host": "gpu02", "tag": "v0.0.300", "yes": True, "soak": "0"},
                as_json=False, transport=httpx.ASGITransport(app=app), interval=0.2)
    asyncio.run(app.state.worker.shutdown())
    captured = capsys.readouterr()
    assert rc == 3, captured.out + captured.err  # ROLLED_BACK
    assert "ROLLED_BACK" in captured.out.splitlines()[-1]
    assert " fail -> " in captured.out  # human transition lines


def test_a_stopped_server_leaves_the_run_for_resume(sim_app, live_server):
    fleet, settings, app = sim_app()
    url = live_server(app)
    with httpx.Client(base_url=url, headers=AUTH) as c:
        run_id = c.post("/runs", json={"action": "rollout", "host": "gpu02", "tag": "v0.0.300", "yes": True,
                                       "soak": "0"}).json()["run_id"]
        assert run_id.startswith("gpu02-")
        wait_for(lambda: c.get(f"/runs/{run_id}").json()["transitions"], "the run's first transition")
    live_server.stop_all()  # SIGTERM-like: the running task is cancelled mid-run
    j = SqliteJournal(settings.journal_location())
    try:
        run = j.get_run(run_id)
        assert not run.terminal and j.transitions(run_id)
        # execute releases the lease of a cancelled run (it stopped at an await, between two
        # journal writes): `orchestrate resume` continues it at once, without waiting for the TTL
        assert j.current_lease("gpu02") is None and j.held_lease("gpu02") is None
    finally:
        j.close()
