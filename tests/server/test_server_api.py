"""`orchestrate serve` without hosts: auth, input checks, leases, signals, the worker's resilience.

The executor is replaced where a run is started (these tests are about the service around it);
the simulator-backed tests run real rollouts.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.testclient import TestClient
from waiting import expire_lease

import orchestrator.teamserver.worker as server_mod
from helpers_server import AUTH, BASE_URL, HOST_TOKEN, TOKEN, wait_for
from orchestrator.journal import SqliteJournal
from orchestrator.journal.base import LeaseHeld
from orchestrator.service.session import owner_id
from orchestrator.teamserver.app import create_app
from orchestrator.util.user_errors import UserError

ENV_TOKEN = "env-token-0f9e8d7c6b5a4938271605f4e3d2c1b0"
ROLLOUT = {"action": "rollout", "host": "gpu02", "tag": "v0.0.300", "runbook": None, "yes": False, "soak": None}


@pytest.fixture
def app(settings):
    return create_app(settings, token=TOKEN)


@pytest.fixture
def client(app):
    with TestClient(app, base_url=BASE_URL) as c:
        yield c


@pytest.fixture
def journal(settings, client):
    """A second connection to the server's journal: what a CLI on another machine would see."""
    j = SqliteJournal(settings.journal_location())
    yield j
    j.close()


def other_runner_holds(journal, host="gpu02"):
    run = journal.create_run(host=host, runbook="gpu02-glm53-w4afp8-long-context", tag="v0.0.299",
                             kind="rollout", state="INIT", context={})
    journal.acquire_lease(host, run.run_id, "alice-laptop:4242", 120.0)
    return run


# --------------------------------------------------------------------------- open routes


def test_healthz_is_open_and_says_ok_without_details(client):
    r = client.get("/healthz")
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}


def test_metrics_are_open_prometheus_text_from_the_apps_own_registry(client, journal):
    client.app.state.worker.metrics.snapshot.invalidate()  # the start-up snapshot predates this run
    other_runner_holds(journal)  # one unfinished run, leased: RUNNING
    r = client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert 'orchestrator_runs{state="RUNNING"} 1.0' in text
    assert 'orchestrator_runs{state="DONE"} 0.0' in text
    assert "orchestrator_journal_up 1.0" in text
    assert "# TYPE orchestrator_gate_wait_seconds histogram" in text
    assert "# TYPE orchestrator_effects_total counter" in text
    # a per-app registry: the process-global one's collectors are not in it
    assert "python_gc_objects_collected_total" not in text


def test_two_apps_have_separate_registries(settings):
    a, b = create_app(settings, token=TOKEN), create_app(settings, token=TOKEN)
    assert a.state.worker.metrics.registry is not b.state.worker.metrics.registry


# --------------------------------------------------------------------------- auth

PROTECTED = [
    ("POST", "/runs", ROLLOUT),
    ("GET", "/runs", None),
    ("GET", "/runs/gpu02-20261130T0812-7f3a", None),
    ("POST", "/runs/gpu02-20261130T0812-7f3a/approve", {"gate": "*"}),
    ("POST", "/runs/gpu02-20261130T0812-7f3a/abort", {}),
]
BAD_AUTH = [
    None,
    {"Authorization": "Bearer wrong-token"},
    {"Authorization": f"Basic {TOKEN}"},
    {"Authorization": f"Bearer {TOKEN}x"},
    {"Authorization": "Bearer "},
]


@pytest.mark.parametrize("method,path,body", PROTECTED)
@pytest.mark.parametrize("headers", BAD_AUTH, ids=["none", "wrong", "basic", "longer", "empty"])
def test_every_route_but_health_and_metrics_needs_the_token(client, journal, method, path, body, headers):
    r = client.request(method, path, json=body, headers=headers or {})
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"
    assert "token" in r.json()["error"]
    assert journal.list_runs() == []  # nothing was submitted


def test_the_right_token_opens_the_routes(client):
    r = client.get("/runs", headers=AUTH)
    assert r.status_code == 200 and r.json() == {"runs": []}


def test_refuses_to_start_without_a_token(settings):
    with pytest.raises(UserError, match="ORCHESTRATOR_SERVER_TOKEN"):
        create_app(settings)
    with pytest.raises(UserError):
        create_app(settings, token="  ")


def test_token_from_the_environment(settings, monkeypatch):
    monkeypatch.setenv("ORCHESTRATOR_SERVER_TOKEN", ENV_TOKEN)
    with TestClient(create_app(settings), base_url=BASE_URL) as c:
        assert c.get("/runs").status_code == 401
        assert c.get("/runs", headers={"Authorization": f"Bearer {ENV_TOKEN}"}).status_code == 200


def test_insecure_no_auth_opens_everything_and_warns(settings, capsys):
    with TestClient(create_app(settings, insecure_no_auth=True), base_url=BASE_URL) as c:
        assert c.get("/runs").status_code == 200
    assert "serving_without_auth" in capsys.readouterr().err


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "body,status,fragment",
    [
        ({**ROLLOUT, "host": "gpu99"}, 400, "unknown host 'gpu99'"),
        ({**ROLLOUT, "tag": "1.2"}, 400, "tag '1.2' is malformed"),
        ({**ROLLOUT, "tag": "v0.0.300; rm -rf"}, 400, "malformed"),
        ({**ROLLOUT, "host": "gpu13"}, 400, "not gpu13"),
        ({**ROLLOUT, "runbook": "no-such-runbook"}, 400, "no-such-runbook"),
        ({**ROLLOUT, "soak": "soon"}, 400, "soak"),
        ({**ROLLOUT, "bogus": 1}, 400, "unknown field 'bogus'"),
        ({"action": "deploy", "host": "gpu02"}, 400, "action must be one of rollout, rollback, resume"),
        ({"host": "gpu02"}, 400, "needs an action"),
        ({"action": "rollout", "host": "gpu02"}, 400, "tag: Field required"),
        ({"action": "rollback", "host": "gpu02", "replica": "r3"}, 400, "replica"),
        ({"action": "rollback", "host": "gpu02", "to_tag": "v0.0.299"}, 400, "--to-tag and --to-file go together"),
        ({"action": "resume", "run_id": "gpu02-20990101T0000-dead"}, 404, "no run 'gpu02-20990101T0000-dead'"),
    ],
)
def test_bad_input_is_a_one_line_400_with_the_exit_code(client, journal, body, status, fragment):
    r = client.post("/runs", json=body, headers=AUTH)
    assert r.status_code == status, r.text
    err = r.json()
    assert fragment in err["error"]
    assert "\n" not in err["error"]
    assert err["exit_code"] == 2
    assert journal.list_runs() == []


def test_a_body_that_is_not_json_is_a_400(client):
    r = client.post("/runs", content=b"{not json", headers={**AUTH, "content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"] == "the request body is not JSON"
    r = client.post("/runs", content=b"", headers={**AUTH, "content-type": "application/json"})
    assert r.status_code == 400 and "JSON body" in r.json()["error"]


def test_unknown_run_is_404_on_every_run_route(client):
    for method, path in [("GET", "/runs/nope"), ("POST", "/runs/nope/approve"), ("POST", "/runs/nope/abort")]:
        r = client.request(method, path, json={}, headers=AUTH)
        assert r.status_code == 404, (method, path)
        assert "no run 'nope'" in r.json()["error"]


# --------------------------------------------------------------------------- leases


def test_a_leased_host_is_a_409_and_nothing_is_journaled(client, journal):
    holder = other_runner_holds(journal)
    r = client.post("/runs", json=ROLLOUT, headers=AUTH)
    assert r.status_code == 409
    err = r.json()
    assert err["exit_code"] == 5
    assert holder.run_id in err["error"] and "alice-laptop:4242" in err["error"]
    assert [x.run_id for x in journal.list_runs()] == [holder.run_id]
    # a rollback of that host is refused the same way
    r = client.post("/runs", json={"action": "rollback", "host": "gpu02", "to_tag": "v0.0.299", "to_file": "prod/x.yaml"},
                    headers=AUTH)
    assert r.status_code == 409 and holder.run_id in r.json()["error"]


def test_a_lease_won_by_another_runner_after_the_check_leaves_the_run_unstarted(app, client, journal, monkeypatch):
    """The race two servers can run: both see a free host; admission gives the lease (and the run) to one."""
    holder = other_runner_holds(journal)
    worker = app.state.worker
    monkeypatch.setattr(worker.session.journal, "current_lease", lambda host: None)  # the check saw a free host
    started: list[str] = []

    async def must_not_run(*a: Any, **kw: Any) -> None:  # pragma: no cover - failing path
        started.append("ran")

    monkeypatch.setattr(server_mod, "execute", must_not_run)
    r = client.post("/runs", json=ROLLOUT, headers=AUTH)
    assert r.status_code == 409 and r.json()["exit_code"] == 5
    assert holder.run_id in r.json()["error"] and "nothing was started" in r.json()["error"]
    # admission (orchestrator/service/admission.py) journals the run and takes the lease in one transaction:
    # the loser leaves no run behind
    assert [x.run_id for x in journal.list_runs()] == [holder.run_id]
    assert started == []
    assert journal.current_lease("gpu02").run_id == holder.run_id


# --------------------------------------------------------------------------- approve / abort


def test_approve_and_abort_reach_the_journal(client, journal):
    run = other_runner_holds(journal)
    r = client.post(f"/runs/{run.run_id}/approve", json={"gate": "*", "by": "bob@laptop"}, headers=AUTH)
    assert r.status_code == 200
    assert r.json()["approved_by"].startswith("bob@laptop via ")
    assert journal.approvals(run.run_id) == {"*"}
    r = client.post(f"/runs/{run.run_id}/abort", json={}, headers=AUTH)
    assert r.status_code == 200
    body = r.json()
    assert body["abort_requested"] is True and body["runner"] == "alice-laptop:4242"
    assert journal.abort_requested(run.run_id)
    detail = client.get(f"/runs/{run.run_id}", headers=AUTH).json()
    assert detail["abort_requested"] is True and detail["approvals"] == ["*"]
    assert detail["lease"]["owner"] == "alice-laptop:4242"


def test_resume_of_a_run_another_runner_holds_is_refused(client, journal):
    run = other_runner_holds(journal)
    r = client.post("/runs", json={"action": "resume", "run_id": run.run_id}, headers=AUTH)
    assert r.status_code == 409 and r.json()["exit_code"] == 5
    assert f"run {run.run_id} is being run by alice-laptop:4242" in r.json()["error"]
    assert detail(client, run.run_id)["worker"] is None  # nothing of it runs here
    assert journal.current_lease("gpu02").owner == "alice-laptop:4242"


def test_abort_without_a_runner_ends_a_run_that_changed_nothing(client, journal):
    """Nobody drives it and it sent nothing that changes the host: ended ABORTED at once, with
    what the host looks like (here: unreachable, said so), so the tier is never blocked by it."""
    run = journal.create_run(host="gpu02", runbook="gpu02-glm53-w4afp8-long-context", tag="v0.0.300",
                             kind="rollout", state="INIT", context={})
    r = client.post(f"/runs/{run.run_id}/abort", json={}, headers=AUTH)
    assert r.status_code == 200
    assert r.json()["runner"] is None and r.json()["ended"] is True
    assert f"run {run.run_id} ended ABORTED" in r.json()["message"] and "host now:" in r.json()["message"]
    ended = journal.get_run(run.run_id)
    assert ended.terminal and ended.outcome == "ABORTED" and "state is unknown" in ended.message


def test_abort_without_a_runner_of_a_run_that_changed_the_host_says_resume_performs_it(client, journal):
    run = journal.create_run(host="gpu02", runbook="gpu02-glm53-w4afp8-long-context", tag="v0.0.300",
                             kind="rollout", state="INIT", context={})
    lease, _ = journal.acquire_lease("gpu02", run.run_id, "x:1", 60)
    eff = journal.record_intent(lease, run.run_id, "r2.apply", "compose_up", {"x": 1}, mutating=True)
    journal.record_outcome(lease, run.run_id, eff.effect_id, {"status": "success"})
    journal.release(lease)
    r = client.post(f"/runs/{run.run_id}/abort", json={}, headers=AUTH)
    assert r.status_code == 200
    assert r.json()["runner"] is None and f"orchestrate resume {run.run_id}" in r.json()["message"]
    assert not journal.get_run(run.run_id).terminal


def test_signals_on_a_finished_run_are_refused(client, journal):
    run = journal.create_run(host="gpu02", runbook="gpu02-glm53-w4afp8-long-context", tag="v0.0.300",
                             kind="rollout", state="INIT", context={})
    lease, _ = journal.acquire_lease("gpu02", run.run_id, "x:1", 60)
    journal.record_transition(lease, run.run_id, "INIT", "ok", "DONE", terminal=True, outcome="DONE", message="done")
    for path in ("approve", "abort"):
        r = client.post(f"/runs/{run.run_id}/{path}", json={}, headers=AUTH)
        assert r.status_code == 400 and "already ended DONE" in r.json()["error"]
    r = client.post("/runs", json={"action": "resume", "run_id": run.run_id}, headers=AUTH)
    assert r.status_code == 400 and r.json()["exit_code"] == 0  # the outcome's exit code, as the CLI's resume


# --------------------------------------------------------------------------- the worker


class FakeExecute:
    """Stands in for runner.execute: plays a few progress events, then does what the test says."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.behaviours: list[str] = []
        self.cancelled: list[str] = []

    async def __call__(self, session, run, rb, table, *, progress=None, yes=False, soak=None):
        self.calls.append(run.run_id)
        how = self.behaviours.pop(0) if self.behaviours else "return"
        progress.event("step_started", state=table.start, say="first", phase=None)
        progress.event("effect", action="compose_down", services=["x"], file="f", tag="t")
        progress.event("waiting", gate="something slow")
        if how == "raise":
            raise RuntimeError(f"boom, and the host token {HOST_TOKEN} leaked into the message")
        if how == "hang":
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled.append(run.run_id)
                raise
        await session.clock.sleep(0)
        progress.event("transition", state=table.start, event_name="ok", to="NEXT", note="")
        return session.journal.get_run(run.run_id)


@pytest.fixture
def fake_execute(monkeypatch):
    fake = FakeExecute()
    monkeypatch.setattr(server_mod, "execute", fake)
    return fake


def detail(client, run_id):
    return client.get(f"/runs/{run_id}", headers=AUTH).json()


def test_a_failing_run_is_logged_and_left_for_resume_and_the_server_goes_on(client, journal, fake_execute, capsys):
    fake_execute.behaviours = ["raise", "return"]
    r = client.post("/runs", json=ROLLOUT, headers=AUTH)
    assert r.status_code == 202
    run_id = r.json()["run_id"]
    d = wait_for(lambda: (x := detail(client, run_id))["worker"]["status"] == "failed" and x, "the run to fail")
    assert "RuntimeError: boom" in d["worker"]["error"] and f"orchestrate resume {run_id}" in d["worker"]["error"]
    assert HOST_TOKEN not in client.get(f"/runs/{run_id}", headers=AUTH).text
    assert not d["terminal"]
    err = capsys.readouterr().err
    assert "run_failed" in err and HOST_TOKEN not in err
    # the server is fine, the host stays leased to the failed run (for resume), and resume works here
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.app.state.worker.active_count() == 0
    r = client.post("/runs", json=ROLLOUT, headers=AUTH)
    assert r.status_code == 409 and run_id in r.json()["error"]
    r = client.post("/runs", json={"action": "resume", "run_id": run_id}, headers=AUTH)
    assert r.status_code == 202 and r.json()["run_id"] == run_id
    wait_for(lambda: detail(client, run_id)["worker"]["status"] == "finished", "the resumed run")
    assert fake_execute.calls == [run_id, run_id]


def test_progress_events_feed_the_follower_view_and_the_metrics(client, fake_execute):
    r = client.post("/runs", json=ROLLOUT, headers=AUTH)
    run_id = r.json()["run_id"]
    d = wait_for(lambda: (x := detail(client, run_id))["worker"]["status"] == "finished" and x, "the run")
    kinds = [e["event"] for e in d["worker"]["events"]]
    assert kinds == ["step_started", "effect", "waiting", "transition"]
    assert d["worker"]["events"][1]["action"] == "compose_down"
    text = client.get("/metrics").text
    # the start state of the rollout table is a `check` step
    assert 'orchestrator_gate_wait_seconds_count{kind="check"} 1.0' in text


def test_resume_of_a_run_running_here_is_refused(client, fake_execute):
    fake_execute.behaviours = ["hang"]
    run_id = client.post("/runs", json=ROLLOUT, headers=AUTH).json()["run_id"]
    wait_for(lambda: detail(client, run_id)["worker"]["status"] == "running", "the run to start")
    r = client.post("/runs", json={"action": "resume", "run_id": run_id}, headers=AUTH)
    assert r.status_code == 409 and "already running on this server" in r.json()["error"]
    assert client.app.state.worker.active_count() == 1


def test_shutdown_cancels_running_runs_and_leaves_their_lease_to_expire(settings, fake_execute):
    fake_execute.behaviours = ["hang"]
    with TestClient(create_app(settings, token=TOKEN), base_url=BASE_URL) as c:
        run_id = c.post("/runs", json=ROLLOUT, headers=AUTH).json()["run_id"]
        wait_for(lambda: detail(c, run_id)["worker"]["status"] == "running", "the run to start")
    assert fake_execute.cancelled == [run_id]
    j = SqliteJournal(settings.journal_location())
    try:
        assert not j.get_run(run_id).terminal
        # not released: until it expires, another runner is refused
        with pytest.raises(LeaseHeld):
            j.acquire_lease("gpu02", "someone-else", "other:1", 60)
        expire_lease(settings.journal_location(), "gpu02")  # its TTL has run out
        assert j.current_lease("gpu02") is None
    finally:
        j.close()
    # another server resumes it (taking over the expired lease)
    with TestClient(create_app(settings, token=TOKEN), base_url=BASE_URL) as c:
        r = c.post("/runs", json={"action": "resume", "run_id": run_id}, headers=AUTH)
        assert r.status_code == 202
        d = wait_for(lambda: (x := detail(c, run_id))["worker"]["status"] == "finished" and x, "the resumed run")
        assert any(e["event"] == "note" and "took over the expired lease" in e["text"] for e in d["worker"]["events"])
    assert fake_execute.calls == [run_id, run_id]


def test_list_runs_shows_what_this_server_runs(client, fake_execute):
    run_id = client.post("/runs", json=ROLLOUT, headers=AUTH).json()["run_id"]
    wait_for(lambda: detail(client, run_id)["worker"]["status"] == "finished", "the run")
    runs = client.get("/runs", headers=AUTH).json()["runs"]
    assert [(r["run_id"], r["host"], r["kind"], r["worker_status"]) for r in runs] == [(run_id, "gpu02", "rollout", "finished")]
    assert client.get("/runs?host=gpu13", headers=AUTH).json() == {"runs": []}
    assert client.get("/runs?limit=x", headers=AUTH).status_code == 400


def test_owner_of_the_servers_leases_is_this_process(client, journal, fake_execute):
    fake_execute.behaviours = ["hang"]
    run_id = client.post("/runs", json=ROLLOUT, headers=AUTH).json()["run_id"]
    lease = journal.current_lease("gpu02")
    assert lease.run_id == run_id and lease.owner == owner_id()


def test_signal_answers_are_scrubbed_as_they_leave(client, journal):
    """What an approve, pause, continue or abort answers leaves for a person: scrubbed like every
    answer (here a careless `by` that pastes the server's token)."""
    run = other_runner_holds(journal)
    careless = f"carol {TOKEN}"
    answers = [client.post(f"/runs/{run.run_id}/{path}", json={"by": careless, **extra}, headers=AUTH)
               for path, extra in (("approve", {"gate": "r2.soak"}), ("pause", {}), ("continue", {}), ("abort", {}))]
    assert [r.status_code for r in answers] == [200, 200, 200, 200], [r.text for r in answers]
    assert "carol ***" in answers[0].text
    for r in answers:
        assert TOKEN not in r.text

    journaled = repr(journal.audit(run.run_id))
    assert "carol ***" in journaled and TOKEN not in journaled  # the journal keeps text scrubbed too
