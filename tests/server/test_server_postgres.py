"""Two `orchestrate serve` processes' worth of apps sharing one PostgreSQL journal.

Each app has its own Session (own connection) and runs in its own event loop thread (one
TestClient each), so the two submissions really race in the database.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from starlette.testclient import TestClient

import orchestrator.teamserver.worker as server_mod
from helpers_server import AUTH, BASE_URL, TOKEN, sim_session_factory, sim_settings, wait_for
from orchestrator.journal import open_journal
from orchestrator.teamserver.app import create_app

pytestmark = pytest.mark.postgres

FAST = {"action": "rollout", "host": "gpu02", "tag": "v0.0.300", "yes": True, "soak": "0"}


def submit_at_once(clients: list[TestClient], body: dict[str, Any]) -> list[Any]:
    barrier = threading.Barrier(len(clients))
    answers: list[Any] = [None] * len(clients)

    def go(i: int) -> None:
        barrier.wait()
        answers[i] = clients[i].post("/runs", json=body, headers=AUTH)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return answers


@pytest.mark.e2e
def test_two_servers_one_journal_roll_gpu02_once(sim_fleet, pg_journal_url, tmp_path):
    fleet = sim_fleet()
    apps = [create_app(sim_settings(fleet, tmp_path / f"server{i}", database_url=pg_journal_url), token=TOKEN,
                       session_factory=sim_session_factory) for i in range(2)]
    with TestClient(apps[0], base_url=BASE_URL) as a, TestClient(apps[1], base_url=BASE_URL) as b:
        answers = submit_at_once([a, b], FAST)
        assert sorted(r.status_code for r in answers) == [202, 409], [r.text for r in answers]
        win = 0 if answers[0].status_code == 202 else 1
        winner, loser = (a, b) if win == 0 else (b, a)
        run_id = answers[win].json()["run_id"]
        refusal = answers[1 - win].json()
        assert refusal["exit_code"] == 5 and run_id in refusal["error"]

        d = wait_for(lambda: (x := winner.get(f"/runs/{run_id}", headers=AUTH).json())["terminal"] and x,
                     "the winning rollout to end")
        assert d["outcome"] == "DONE", d["message"]
        # the other server reads the same run from the shared journal; it never ran it
        seen = loser.get(f"/runs/{run_id}", headers=AUTH).json()
        assert seen["outcome"] == "DONE" and seen["worker"] is None
        runs = loser.get("/runs?host=gpu02", headers=AUTH).json()["runs"]
        started = [r["run_id"] for r in runs if loser.get(f"/runs/{r['run_id']}", headers=AUTH).json()["transitions"]]
        assert started == [run_id]
        assert 'orchestrator_runs{state="DONE"} 1.0' in loser.get("/metrics").text
        assert loser.get("/healthz").json() == {"status": "ok"}
    assert fleet.check_invariants() == []


def test_when_both_see_a_free_host_the_lease_decides(settings, pg_journal_url, monkeypatch):
    """Both servers pass the pre-check; the database admits one (its run and its lease), refuses the other."""
    settings = settings.model_copy(update={"database_url": pg_journal_url})
    cancelled: list[str] = []

    async def hang(session, run, rb, table, **kw):
        import asyncio

        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(run.run_id)
            raise

    monkeypatch.setattr(server_mod, "execute", hang)
    apps = [create_app(settings, token=TOKEN) for _ in range(2)]
    with TestClient(apps[0], base_url=BASE_URL) as a, TestClient(apps[1], base_url=BASE_URL) as b:
        for app in apps:
            monkeypatch.setattr(app.state.worker.session.journal, "current_lease", lambda host: None)
        answers = submit_at_once([a, b], {**FAST, "soak": None})
        assert sorted(r.status_code for r in answers) == [202, 409], [r.text for r in answers]
        win = 0 if answers[0].status_code == 202 else 1
        run_id = answers[win].json()["run_id"]
        assert "nothing was started" in answers[1 - win].json()["error"], answers[1 - win].text
    assert cancelled == [run_id]
    j = open_journal(pg_journal_url)
    try:
        runs = j.list_runs(host="gpu02")
        # one admission transaction journals the run and takes the lease: the loser leaves no run
        assert [r.run_id for r in runs] == [run_id] and j.transitions(run_id) == []
        lease = j.current_lease("gpu02")
        assert lease is not None and lease.run_id == run_id  # left to expire by the stopped server
    finally:
        j.close()
