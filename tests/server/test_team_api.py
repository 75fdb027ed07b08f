"""Issue 24's API items: NUL bytes, a boolean soak, what a viewer reads, who did what, pause and
continue, and an approval from a browser naming the gate the run waits at (issue 21, case 3)."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from helpers_server import AUTH, BASE_URL, TOKEN
from orchestrator.journal import SqliteJournal
from orchestrator.teamserver.app import create_app
from orchestrator.teamserver.auth import add_token

RUNBOOK = "gpu02-glm53-w4afp8-long-context"
BROWSER = {**AUTH, "Origin": "http://127.0.0.1", "Sec-Fetch-Site": "same-origin"}


@pytest.fixture
def client(settings):
    with TestClient(create_app(settings, token=TOKEN, adopt=False), base_url=BASE_URL) as c:
        yield c


@pytest.fixture
def journal(settings, client):
    j = SqliteJournal(settings.journal_location())
    yield j
    j.close()


def run_at(journal, state: str, *, host: str = "gpu02"):
    """A run of another runner, moved to `state` (as the journal would show it mid-run)."""
    run = journal.create_run(host=host, runbook=RUNBOOK, tag="v0.0.300", kind="rollout", state=state, context={})
    journal.acquire_lease(host, run.run_id, "alice-laptop:4242", 120.0)
    return run


@pytest.mark.parametrize("path", ["/runs/gpu02-x%00y", "/runs?host=gpu%0002", "/runs/gpu02-x%00y/abort"])
def test_a_nul_byte_in_a_path_or_query_is_a_400(client, path):
    method = client.post if path.endswith("abort") else client.get
    kwargs = {"json": {}} if path.endswith("abort") else {}
    r = method(path, headers=AUTH, **kwargs)
    assert r.status_code == 400, r.text
    assert "control character" in r.json()["error"]


def test_a_nul_byte_in_by_or_any_field_is_a_400(client, journal):
    run = run_at(journal, "r2.soak")
    r = client.post(f"/runs/{run.run_id}/abort", json={"by": "bob\u0000"}, headers=AUTH)
    assert r.status_code == 400 and r.json()["exit_code"] == 2
    r = client.post(f"/runs/{run.run_id}/approve", json={"gate": "r2.soak\u0000"}, headers=AUTH)
    assert r.status_code == 400
    r = client.post("/runs", json={"action": "rollout", "host": "gpu02", "tag": "v0\u0000"}, headers=AUTH)
    assert r.status_code == 400
    assert not journal.abort_requested(run.run_id) and journal.approvals(run.run_id) == set()


@pytest.mark.parametrize("soak", [True, False])
def test_a_boolean_soak_is_a_400(client, soak):
    r = client.post("/runs", json={"action": "rollout", "host": "gpu02", "tag": "v0.0.300", "soak": soak}, headers=AUTH)
    assert r.status_code == 400 and r.json()["error"].startswith("soak"), r.text


def test_a_viewer_never_reads_where_the_journal_or_the_state_lives(settings, tmp_path):
    """The run's 'journal: ... log: ...' note named the state path and (PostgreSQL) the journal's
    user, host and port: GET /runs/{id} keeps it on the server."""
    tokens = tmp_path / "tokens.yaml"
    viewer = add_token(tokens, "grafana", "viewer")
    app = create_app(settings, tokens_file=tokens, adopt=False)
    with TestClient(app, base_url=BASE_URL) as c:
        worker = app.state.worker
        j = worker.session.journal
        run = j.create_run(host="gpu02", runbook=RUNBOOK, tag="v0.0.300", kind="rollout", state="INIT", context={})
        from orchestrator.teamserver.worker import ActiveRun

        active = ActiveRun(run.run_id, "gpu02", worker=worker)
        worker._remember(active)
        active.event(
            "note", text=f"journal: postgresql://orch@db.internal:5432/j  log: {settings.state_dir}/logs/x.jsonl")
        text = c.get(f"/runs/{run.run_id}", headers={"Authorization": f"Bearer {viewer}"}).text
        assert str(settings.state_dir) not in text and "db.internal" not in text and "5432" not in text
        assert "kept on the server" in text
        # and wherever else a path would show (a failed run's error, a message): the placeholder
        active.error = f"OSError: [Errno 28] No space left on device: '{settings.state_dir}/logs/x.jsonl'"
        for path in (f"/runs/{run.run_id}", f"/ui/fragments/runs/{run.run_id}"):
            text = c.get(path, headers={"Authorization": f"Bearer {viewer}"}).text
            assert str(settings.state_dir) not in text and "journal.sqlite3" not in text, path
            assert "No space left on device: &#x27;&lt;server path&gt;" in text or \
                "No space left on device: '<server path>" in text, path


def test_approve_from_a_browser_names_the_waiting_gate(client, journal):
    """Issue 21 case 3 at the API: a browser's approval is held to the gate the run waits at."""
    early = run_at(journal, "r2.cold-start")
    r = client.post(f"/runs/{early.run_id}/approve", json={"gate": "*"}, headers=BROWSER)
    assert r.status_code == 400 and "not *" in r.json()["error"] and "r2.soak" in r.json()["error"]
    r = client.post(f"/runs/{early.run_id}/approve", json={"gate": "r2.soak"}, headers=BROWSER)
    assert r.status_code == 409 and "is at r2.cold-start, not waiting at r2.soak" in r.json()["error"]
    r = client.post(f"/runs/{early.run_id}/approve", json={"gate": "r2.soak", "at_gate": True}, headers=AUTH)
    assert r.status_code == 409  # the same rule for any client that asks for it
    assert journal.approvals(early.run_id) == set()
    # the CLI's pre-approval (no browser headers, no at_gate) still works as documented
    assert client.post(f"/runs/{early.run_id}/approve", json={"gate": "*"}, headers=AUTH).status_code == 200
    journal.close()


def test_approve_with_no_gate_approves_the_waiting_gate_or_is_a_400(client, journal):
    """An API approve that names no gate (the CLI's `approve RUN --server`): the gate the run waits
    at now, never `*` (tests/attack/test_attack_wildcard_approve.py)."""
    early = run_at(journal, "r2.cold-start")
    r = client.post(f"/runs/{early.run_id}/approve", json={}, headers=AUTH)
    assert r.status_code == 400 and "not at an approval gate" in r.json()["error"], r.text
    assert journal.approvals(early.run_id) == set()
    waiting = run_at(journal, "r2.soak", host="gpu13")
    r = client.post(f"/runs/{waiting.run_id}/approve", json={}, headers=AUTH)
    assert r.status_code == 200 and r.json()["gate"] == "r2.soak", r.text
    assert journal.approvals(waiting.run_id) == {"r2.soak"}
    journal.close()


def test_approve_at_the_gate_from_a_browser_is_journaled(settings, client):
    j = SqliteJournal(settings.journal_location())
    run = j.create_run(host="gpu13", runbook=RUNBOOK, tag="v0.0.300", kind="rollout", state="r2.soak", context={})
    r = client.post(f"/runs/{run.run_id}/approve", json={"gate": "r2.soak", "at_gate": True}, headers=BROWSER)
    assert r.status_code == 200, r.text
    assert j.approvals(run.run_id) == {"r2.soak"}
    j.close()


def test_pause_and_continue_are_journaled_with_who_and_refused_twice(client, journal):
    run = run_at(journal, "r2.cold-start")
    r = client.post(f"/runs/{run.run_id}/pause", json={"by": "carol"}, headers=AUTH)
    assert r.status_code == 200 and "next safe step" in r.json()["message"]
    assert journal.paused(run.run_id).by.startswith("carol via ")
    again = client.post(f"/runs/{run.run_id}/pause", json={}, headers=AUTH)
    assert again.status_code == 400 and "already paused" in again.json()["error"]
    d = client.get(f"/runs/{run.run_id}", headers=AUTH).json()
    assert d["paused"]["by"].startswith("carol via ") and d["who"]["paused"]["by"].startswith("carol")
    assert client.post(f"/runs/{run.run_id}/continue", json={}, headers=AUTH).status_code == 200
    assert journal.paused(run.run_id) is None
    r = client.post(f"/runs/{run.run_id}/continue", json={}, headers=AUTH)
    assert r.status_code == 400 and "not paused" in r.json()["error"]
    actions = [e["action"] for e in client.get(f"/runs/{run.run_id}", headers=AUTH).json()["audit"]]
    assert actions == ["paused", "continued"]


def test_a_viewer_cannot_pause(settings, tmp_path):
    tokens = tmp_path / "tokens.yaml"
    viewer = add_token(tokens, "grafana", "viewer")
    with TestClient(create_app(settings, tokens_file=tokens, adopt=False), base_url=BASE_URL) as c:
        for path in ("pause", "continue"):
            r = c.post(f"/runs/x/{path}", json={}, headers={"Authorization": f"Bearer {viewer}"})
            assert r.status_code == 403


def test_who_did_what_in_the_api(client, journal):
    run = run_at(journal, "r2.soak")
    client.post(f"/runs/{run.run_id}/approve", json={"gate": "r2.soak", "by": "dave"}, headers=AUTH)
    client.post(f"/runs/{run.run_id}/abort", json={"by": "erin"}, headers=AUTH)
    d = client.get(f"/runs/{run.run_id}", headers=AUTH).json()
    who = d["who"]
    assert who["approved"][0]["gate"] == "r2.soak" and who["approved"][0]["by"].startswith("dave via ")
    assert who["aborted"]["by"].startswith("erin via ") and who["aborted"]["at"]
    assert {e["action"] for e in d["audit"]} == {"approved", "abort_requested"}


def test_the_submitter_and_the_adopter_are_journaled(settings, monkeypatch):
    """The submitter is journaled (so "who" survives a restart and an adoption), and so is the
    server that adopted an orphan."""
    import asyncio

    from test_server_api import FakeExecute

    import orchestrator.teamserver.worker as server_mod

    fake = FakeExecute()
    monkeypatch.setattr(server_mod, "execute", fake)
    app = create_app(settings, token=TOKEN, adopt=False)
    with TestClient(app, base_url=BASE_URL) as c:
        r = c.post("/runs", json={"action": "rollout", "host": "gpu02", "tag": "v0.0.300", "by": "frank@laptop"},
                   headers=AUTH)
        assert r.status_code == 202
        run_id = r.json()["run_id"]
        from helpers_server import wait_for

        wait_for(lambda: c.get(f"/runs/{run_id}", headers=AUTH).json()["worker"]["status"] == "finished", "the run")
        who = c.get(f"/runs/{run_id}", headers=AUTH).json()["who"]
        assert who["submitted"]["by"].startswith("frank@laptop via ")  # single-token mode: the client's word
        assert "rollout via the server" in who["submitted"]["detail"]
        listed = c.get("/runs", headers=AUTH).json()["runs"][0]
        assert listed["submitted_by"].startswith("frank@laptop via ") and listed["submitted_at"]
        # an orphan: a run with a transition whose lease has lapsed, adopted by this server
        j = SqliteJournal(settings.journal_location())
        orphan = j.create_run(host="gpu13", runbook=RUNBOOK, tag="v0.0.300", kind="rollout", state="INIT", context={})
        lease, _ = j.acquire_lease("gpu13", orphan.run_id, "gone:1", 0.05)
        j.record_transition(lease, orphan.run_id, "INIT", "ok", "preflight.read-env")
        j.release(lease)
        worker = app.state.worker
        c.portal.call(worker.adopt_once) if hasattr(c, "portal") else asyncio.run(worker.adopt_once())
        assert worker.runs[orphan.run_id].adopted
        d = c.get(f"/runs/{orphan.run_id}", headers=AUTH).json()
        assert d["who"]["adopted"] and d["who"]["adopted"][0]["by"].startswith("server ")
        assert [e["action"] for e in d["audit"]] == ["adopted"]
        j.close()
