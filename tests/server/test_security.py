"""Issue 17, `orchestrate serve` safe on a shared network: each finding replayed against a real
server (uvicorn with this package's limits, on a free loopback port, in a thread), asserting the
safe answer. No network but loopback; every loop here is bounded in count and time.

The executor is replaced (FakeExecute) where a run is started: these tests are about the service.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from waiting import wait_until_async

import orchestrator.teamserver.worker as worker_mod
from helpers_server import AUTH, HOST_TOKEN, TOKEN, build_test_server, wait_for
from orchestrator.journal import SqliteJournal
from orchestrator.journal.base import JournalError
from orchestrator.language.runbook import DEFAULT_RUNBOOK, RUNBOOK_DIR, load_runbook_checked
from orchestrator.service.run_info import check_tag
from orchestrator.service.session import owner_id
from orchestrator.teamserver.app import create_app
from orchestrator.teamserver.auth import add_token, check_token_strength
from orchestrator.teamserver.cli import run_serve
from orchestrator.teamserver.remote import remote
from orchestrator.teamserver.serving import QueryStringFilter
from orchestrator.util.durations import parse_duration
from orchestrator.util.user_errors import UserError

ROLLOUT = {"action": "rollout", "host": "gpu02", "tag": "v0.0.300"}
JSON = {"content-type": "application/json"}


class FakeExecute:
    """runner.execute's stand-in: never touches the journal; "hang" waits until cancelled."""

    def __init__(self) -> None:
        self.behaviours: list[str] = []
        self.calls: list[str] = []

    async def __call__(self, session, run, rb, table, *, progress=None, yes=False, soak=None):
        self.calls.append(run.run_id)
        how = self.behaviours.pop(0) if self.behaviours else "hang"
        progress.event("step_started", state=table.start, say="first", phase=None)
        if how.startswith("raise:"):
            raise RuntimeError(how.removeprefix("raise:"))
        await asyncio.Event().wait()


@pytest.fixture
def fake_execute(monkeypatch: pytest.MonkeyPatch) -> FakeExecute:
    fake = FakeExecute()
    monkeypatch.setattr(worker_mod, "execute", fake)
    return fake


@pytest.fixture
def serve_app(monkeypatch) -> Iterator[Any]:
    """start(app, **build_test_server kwargs) -> base URL of a real uvicorn serving `app` on loopback."""
    started: list[tuple[Any, threading.Thread]] = []

    def start(app: Any, *, scheme: str = "http", **kw: Any) -> str:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        server = build_test_server(app, port, monkeypatch, **kw)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        wait_for(lambda: server.started, "uvicorn to start")
        started.append((server, thread))
        start.server = server  # type: ignore[attr-defined]
        return f"{scheme}://127.0.0.1:{port}"

    yield start
    for server, thread in started:
        server.should_exit = True
        thread.join(timeout=15)


@pytest.fixture
def live(settings, serve_app, fake_execute) -> tuple[str, Any]:
    app = create_app(settings, token=TOKEN)
    return serve_app(app), app


def journal_of(settings) -> SqliteJournal:
    return SqliteJournal(settings.journal_location())


# --------------------------------------------------------------------------- 1. cleartext token, TLS


def test_a_network_bind_without_tls_is_refused_and_no_auth_is_loopback_only(settings, capsys):
    assert run_serve("0.0.0.0", 0, TOKEN, settings) == 2
    err = capsys.readouterr().err
    assert "without TLS" in err and "--insecure-plaintext-on-network" in err and err.count("\n") == 1
    assert run_serve("10.1.2.3", 0, None, settings, insecure_no_auth=True, insecure_plaintext_on_network=True) == 2
    assert "--insecure-no-auth is only allowed on a loopback bind" in capsys.readouterr().err


def test_the_client_refuses_to_send_the_token_in_cleartext_to_another_machine(capsys):
    assert remote("http://orchestrate.internal:8000", TOKEN, "runs", {}, as_json=False) == 2
    assert "cleartext" in capsys.readouterr().err


def test_tls_end_to_end_with_a_pinned_ca(settings, serve_app, fake_execute, tmp_path, capsys):
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert_pem, key_pem, ca_pem = tmp_path / "server.pem", tmp_path / "server.key", tmp_path / "ca.pem"
    cert.private_key_pem.write_to_path(str(key_pem))
    cert.cert_chain_pems[0].write_to_path(str(cert_pem))
    ca.cert_pem.write_to_path(str(ca_pem))
    url = serve_app(create_app(settings, token=TOKEN), scheme="https", tls_cert=cert_pem, tls_key=key_pem)
    assert url.startswith("https://")
    assert remote(url, TOKEN, "runs", {}, as_json=True, ca=ca_pem) == 0
    assert json.loads(capsys.readouterr().out) == {"runs": []}
    # not pinned: the system's CAs do not know this one
    assert remote(url, TOKEN, "runs", {}, as_json=False) == 2  # the operator's to fix: one line naming the option
    err = capsys.readouterr().err
    assert "CERTIFICATE_VERIFY_FAILED" in err and "check --server-ca" in err
    # another CA pinned: refused too
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    assert remote(url, TOKEN, "runs", {}, as_json=False, ca=other) == 2
    # plain http to the TLS port gets no answer
    with pytest.raises(httpx.HTTPError):
        httpx.get(url.replace("https://", "http://") + "/healthz", timeout=2)


# --------------------------------------------------------------------------- 2. /metrics cannot freeze the server


def test_healthz_and_a_running_request_stay_fast_while_metrics_is_hammered(settings, serve_app, fake_execute,
                                                                           monkeypatch):
    """A journal read for /metrics (a big journal's census) never holds the event loop: while the
    read is stuck, /healthz and a run's page still answer. The read is held on an event the test
    lets go only after the probes answered, so the proof does not depend on how fast anything is."""
    app = create_app(settings, token=TOKEN)
    worker = app.state.worker
    worker.metrics.snapshot.max_age = 0.0
    census_calls: list[str] = []
    reading, let_go = threading.Event(), threading.Event()
    real_counts = worker.run_counts

    def slow_census() -> dict[str, int]:  # a big journal: the read lasts until the test lets it go
        census_calls.append(threading.current_thread().name)
        reading.set()
        assert let_go.wait(timeout=120), "the test never let the census read go"
        return real_counts()

    monkeypatch.setattr(worker.metrics.snapshot, "_read", slow_census)
    url = serve_app(app)
    with httpx.Client(base_url=url, headers=AUTH, timeout=10) as c:
        run_id = c.post("/runs", json=ROLLOUT).json()["run_id"]
        wait_for(lambda: c.get(f"/runs/{run_id}").json()["worker"]["status"] == "running", "the run")

    async def hammer() -> list[int]:
        async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=60,
                                     limits=httpx.Limits(max_connections=50)) as c:
            scrapes = [asyncio.create_task(c.get("/metrics")) for _ in range(40)]
            await wait_until_async(reading.is_set, "a /metrics scrape to start its journal read")
            statuses: list[int] = []
            try:
                for _ in range(5):  # bounded: 5 probes while the read is stuck and 40 scrapes are in flight
                    r1, r2 = await asyncio.gather(c.get("/healthz"), c.get(f"/runs/{run_id}"))
                    statuses += [r1.status_code, r2.status_code]
                assert not any(t.done() for t in scrapes), "a scrape answered while its journal read was stuck"
            finally:
                let_go.set()
            done = await asyncio.gather(*scrapes)
            assert all(r.status_code == 200 for r in done)
            return statuses

    statuses = asyncio.run(asyncio.wait_for(hammer(), 120))
    assert statuses == [200] * 10  # answered while the journal read was stuck: the loop was never blocked
    assert len(census_calls) <= 4, "concurrent scrapes share one journal read (single flight)"


def test_the_servers_journal_calls_run_off_the_event_loop(settings, serve_app, fake_execute):
    from orchestrator.service.session import Session

    calls: list[tuple[str, bool]] = []

    class Watched:
        """Records each journal call and whether it ran in a thread with a running event loop."""

        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def __getattr__(self, name: str) -> Any:
            attr = getattr(self._inner, name)
            if not callable(attr):
                return attr

            def call(*a: Any, **kw: Any) -> Any:
                calls.append((name, asyncio._get_running_loop() is not None))
                return attr(*a, **kw)

            return call

    def factory(s):
        session = Session.open(s)
        session.journal = Watched(session.journal)
        return session

    app = create_app(settings, token=TOKEN, session_factory=factory)
    app.state.worker.metrics.snapshot.max_age = 0.0
    url = serve_app(app)
    calls.clear()
    with httpx.Client(base_url=url, headers=AUTH, timeout=10) as c:
        run_id = c.post("/runs", json=ROLLOUT).json()["run_id"]
        for path in ("/healthz", "/metrics", "/runs", f"/runs/{run_id}"):
            assert c.get(path).status_code == 200, path
        assert c.post(f"/runs/{run_id}/approve", json={"gate": "*"}).status_code == 200
        assert c.post(f"/runs/{run_id}/abort", json={}).status_code == 200
    names = {n for n, _ in calls}
    assert {"create_run", "acquire_lease", "get_run", "list_runs", "approve", "request_abort"} <= names
    assert [n for n, on_loop in calls if on_loop] == []


# --------------------------------------------------------------------------- 3. Host, Origin, Content-Type


@pytest.mark.parametrize("headers,status", [
    ({"content-type": "text/plain"}, 415),
    ({"content-type": "application/x-www-form-urlencoded"}, 415),
    ({}, 415),
    ({**JSON, "origin": "https://evil.example"}, 403),
    ({**JSON, "origin": "null"}, 403),
    ({**JSON, "sec-fetch-site": "cross-site"}, 403),
])
def test_state_changing_routes_need_json_and_refuse_foreign_origins(live, settings, headers, status):
    url, _ = live
    with httpx.Client(base_url=url, timeout=10) as c:
        for path in ("/runs", "/runs/x/approve", "/runs/x/abort"):
            r = c.post(path, content=json.dumps(ROLLOUT), headers={**AUTH, **headers})
            assert r.status_code == status, (path, r.text)
    j = journal_of(settings)
    try:
        assert j.list_runs() == []
    finally:
        j.close()


def test_same_origin_json_is_accepted(live):
    url, _ = live
    r = httpx.post(f"{url}/runs", json=ROLLOUT, headers={**AUTH, "origin": url}, timeout=10)
    assert r.status_code == 202, r.text


def test_the_host_header_must_name_this_server(settings, serve_app, fake_execute):
    url = serve_app(create_app(settings, token=TOKEN, allowed_hosts=["orchestrate.internal"]))
    with httpx.Client(base_url=url, headers=AUTH, timeout=10) as c:
        assert c.get("/healthz", headers={"host": "evil.example"}).status_code == 400
        assert c.get("/runs", headers={"host": "evil.example:80"}).status_code == 400
        assert c.get("/runs", headers={"host": "orchestrate.internal:8000"}).status_code == 200
        assert c.get("/runs", headers={"host": "localhost"}).status_code == 200


# --------------------------------------------------------------------------- 4. durations


@pytest.mark.parametrize("raw", [
    b'{"action":"rollout","host":"gpu02","tag":"v0.0.300","soak":NaN}',
    b'{"action":"rollout","host":"gpu02","tag":"v0.0.300","soak":Infinity}',
    b'{"action":"rollout","host":"gpu02","tag":"v0.0.300","soak":"NaN"}',
    b'{"action":"rollout","host":"gpu02","tag":"v0.0.300","soak":"inf"}',
    b'{"action":"rollout","host":"gpu02","tag":"v0.0.300","soak":1e999}',
    b'{"action":"rollout","host":"gpu02","tag":"v0.0.300","soak":1e308}',
    b'{"action":"rollout","host":"gpu02","tag":"v0.0.300","soak":"9999999h"}',
    b'{"action":"rollout","host":"gpu02","tag":"v0.0.300","soak":-1}',
])
def test_a_soak_that_is_not_a_finite_bounded_duration_is_a_400_and_nothing_starts(live, settings, fake_execute, raw):
    url, _ = live
    r = httpx.post(f"{url}/runs", content=raw, headers={**AUTH, **JSON}, timeout=10)
    assert r.status_code == 400, r.text
    assert fake_execute.calls == []
    j = journal_of(settings)
    try:
        assert j.list_runs() == [] and j.current_lease("gpu02") is None
    finally:
        j.close()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "nan", "inf", "Infinity", 10**400, "8d", "٣٠"])
def test_parse_duration_refuses_non_finite_and_unbounded(value):
    with pytest.raises(ValueError):
        parse_duration(value)
    assert parse_duration("7d" if False else "168h") == 7 * 24 * 3600


# --------------------------------------------------------------------------- 5. runbooks by name only


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd", f"{RUNBOOK_DIR}/{DEFAULT_RUNBOOK}.yaml",
                                  f"{DEFAULT_RUNBOOK}.yaml", "..", "x" * 101])
def test_runbooks_over_the_api_are_names_in_the_packaged_directory(live, settings, name):
    url, _ = live
    r = httpx.post(f"{url}/runs", json={**ROLLOUT, "runbook": name}, headers=AUTH, timeout=10)
    assert r.status_code == 400
    err = r.json()["error"]
    assert str(RUNBOOK_DIR) not in err and "/etc" not in err.replace(name, "") and "line" not in err
    assert str(settings.state_dir) not in err


def test_runbook_errors_name_no_path_and_no_yaml_line(tmp_path):
    (tmp_path / "broken.yaml").write_text("name: x\nphases: [\n  - a: b\n")
    with pytest.raises(UserError) as e:
        load_runbook_checked("broken", directory=tmp_path)
    assert str(tmp_path) not in str(e.value) and "line" not in str(e.value)
    with pytest.raises(UserError) as e:
        load_runbook_checked("absent", directory=tmp_path)
    assert str(tmp_path) not in str(e.value) and "broken" in str(e.value)


def test_errors_do_not_reveal_the_servers_paths(live, settings, monkeypatch):
    """A rollback with no journaled rollout and no target: the refusal names the journal this
    machine reads (here the server's SQLite path) and compose-manager's history (stubbed: the
    inventory's host is never contacted); the server's answer hides the path."""
    import orchestrator.service.incident

    async def no_history(*_a, **_k):
        return orchestrator.service.incident.HostHistory(None, None, None)

    monkeypatch.setattr(orchestrator.service.incident, "host_history", no_history)
    url, _ = live
    r = httpx.post(f"{url}/runs", json={"action": "rollback", "host": "gpu02"}, headers=AUTH, timeout=10)
    # compose-manager shows no rollout either: the one never-rolled-out message, its journal path redacted
    assert r.status_code == 409 and "gpu02 was never rolled out by this journal (<server path>)" in r.json()["error"]
    assert str(settings.state_dir) not in r.text and "<server path>" in r.text


def test_the_runbook_identity_is_recorded_and_resume_refuses_another_runbook(live, settings, fake_execute):
    url, app = live
    fake_execute.behaviours = ["raise:boom"]
    with httpx.Client(base_url=url, headers=AUTH, timeout=10) as c:
        run_id = c.post("/runs", json=ROLLOUT).json()["run_id"]
        wait_for(lambda: c.get(f"/runs/{run_id}").json()["worker"]["status"] == "failed", "the run to fail")
        name, sha = DEFAULT_RUNBOOK, load_runbook_checked(DEFAULT_RUNBOOK)[1]
        assert c.get(f"/runs/{run_id}").json()["runbook_identity"] == {"name": name, "sha256": sha}
        # the runbook on disk differs from the one the run started with: refused, nothing runs
        j = journal_of(settings)
        try:
            lease = j.acquire_lease("gpu02", run_id, owner_id(), 60)[0]  # the server's own lease, renewed
            run = j.get_run(run_id)
            j.update_context(lease, run_id, {**run.context, "runbook_identity": {"name": name, "sha256": "0" * 64}})
            j.release(lease)
        finally:
            j.close()
        r = c.post("/runs", json={"action": "resume", "run_id": run_id})
        # the recorded text no longer matches the (tampered) recorded digest: the file on disk
        # is checked instead, and it differs too: refused
        assert r.status_code == 409 and "changed since" in r.json()["error"]
        assert fake_execute.calls == [run_id]


# --------------------------------------------------------------------------- 6. tags


@pytest.mark.parametrize("tag", ["v1.2.3\n", "v١.٢.٣", "v1.2.3 ", "v1.2", "v1.2.3.4", "V1.2.3"])
def test_tags_are_ascii_and_whole(live, tag):
    with pytest.raises(UserError):
        check_tag(tag)
    url, _ = live
    r = httpx.post(f"{url}/runs", json={**ROLLOUT, "tag": tag}, headers=AUTH, timeout=10)
    assert r.status_code == 400 and "malformed" in r.json()["error"]


# --------------------------------------------------------------------------- 7. hardening


@pytest.mark.parametrize("token", ["short-token", "a" * 40, "abababababababababababababababab12"])
def test_weak_tokens_are_refused_at_start(settings, token):
    with pytest.raises(UserError):
        check_token_strength(token)
    with pytest.raises(UserError):
        create_app(settings, token=token)


def test_body_size_and_json_depth_limits(live, settings):
    url, _ = live
    with httpx.Client(base_url=url, headers={**AUTH, **JSON}, timeout=10) as c:
        big = json.dumps({**ROLLOUT, "runbook": "x" * (70 * 1024)})
        assert c.post("/runs", content=big).status_code == 413

        def chunks() -> Iterator[bytes]:  # no Content-Length: streamed, counted as it comes
            yield b'{"action": "rollout", "pad": "'
            for _ in range(80):
                yield b"x" * 1024
            yield b'"}'

        assert c.post("/runs", content=chunks()).status_code == 413
        deep = b"[" * 5000 + b"]" * 5000
        r = c.post("/runs", content=deep)
        assert r.status_code == 400 and "nests deeper" in r.json()["error"]
        assert "Traceback" not in r.text


def test_slow_headers_and_too_many_connections(settings, serve_app, fake_execute):
    url = serve_app(create_app(settings, token=TOKEN), header_timeout_s=0.5, limit_concurrency=4)
    port = int(url.rsplit(":", 1)[1])
    slow = socket.create_connection(("127.0.0.1", port), timeout=30)
    slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finishes its headers
    slow.settimeout(60)  # a safety net: the server's 0.5 s header timeout closes it (a timeout here raises)
    assert slow.recv(1024) == b""  # closed by the server
    slow.close()
    # the cap, on a server whose header timeout cannot close the idle connections meanwhile
    url = serve_app(create_app(settings, token=TOKEN), header_timeout_s=60, limit_concurrency=4)
    port = int(url.rsplit(":", 1)[1])
    server = serve_app.server  # type: ignore[attr-defined]
    idle = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(4)]
    try:
        wait_for(lambda: len(server.server_state.connections) >= 4, "the idle connections to be accepted")
        r = httpx.get(f"{url}/healthz", timeout=30)
        assert r.status_code == 503
    finally:
        for s in idle:
            s.close()
    wait_for(lambda: httpx.get(f"{url}/healthz", timeout=30).status_code == 200, "the connections to go")


def test_healthz_says_not_ok_without_driver_details(live, monkeypatch):
    url, app = live
    journal = app.state.worker.session.journal

    def down(*a, **kw):
        raise JournalError("psycopg.OperationalError: connection to server at 10.9.8.7 port 5432 failed: pw-secret")

    monkeypatch.setattr(journal, "list_runs", down)
    app.state.health.invalidate()
    r = httpx.get(f"{url}/healthz", timeout=10)
    assert r.status_code == 503 and r.json() == {"status": "not ok"}


def test_metrics_and_healthz_can_require_the_token(settings, serve_app, fake_execute):
    url = serve_app(create_app(settings, token=TOKEN, protect_metrics=True))
    for path in ("/metrics", "/healthz"):
        assert httpx.get(f"{url}{path}", timeout=10).status_code == 401
        assert httpx.get(f"{url}{path}", headers=AUTH, timeout=10).status_code == 200


def test_the_access_log_never_shows_query_strings(settings, serve_app, fake_execute):
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    handler = Keep(level=logging.INFO)
    url = serve_app(create_app(settings, token=TOKEN), access_log=True, log_level="info")
    access = logging.getLogger("uvicorn.access")
    access.addHandler(handler)
    try:
        httpx.get(f"{url}/runs?host=gpu02&limit=5&secret=hunter2-query-value", headers=AUTH, timeout=10)
        wait_for(lambda: any("/runs" in m for m in records), "the access log line")
    finally:
        access.removeHandler(handler)
    line = next(m for m in records if "/runs" in m)
    assert "hunter2-query-value" not in line and "?" not in line
    rec = logging.LogRecord("uvicorn.access", 20, "", 0, '%s - "%s %s HTTP/%s" %d',
                            ("1.2.3.4:5", "GET", "/x?token=abc", "1.1", 200), None)
    assert QueryStringFilter().filter(rec) and "abc" not in rec.getMessage()


def test_the_approve_gate_is_bounded_and_one_of_the_runs_gates(live, settings):
    url, _ = live
    with httpx.Client(base_url=url, headers=AUTH, timeout=10) as c:
        run_id = c.post("/runs", json=ROLLOUT).json()["run_id"]
        assert c.post(f"/runs/{run_id}/approve", json={"gate": "g" * 201}).status_code == 400
        r = c.post(f"/runs/{run_id}/approve", json={"gate": "r2.soak-typo"})
        assert r.status_code == 400 and "not an approval gate" in r.json()["error"] and "r2.soak" in r.json()["error"]
        assert c.post(f"/runs/{run_id}/approve", json={"gate": "r2.soak"}).status_code == 200
        assert c.get(f"/runs/{run_id}").json()["approvals"] == ["r2.soak"]


# --------------------------------------------------------------------------- 8. per-operator tokens


@pytest.fixture
def team(settings, serve_app, fake_execute, tmp_path) -> tuple[str, dict[str, str], Path]:
    tokens = tmp_path / "tokens.yaml"
    made = {"alice": add_token(tokens, "alice", "operator"), "bob": add_token(tokens, "bob", "viewer")}
    url = serve_app(create_app(settings, tokens_file=tokens))
    return url, made, tokens


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_viewer_reads_but_cannot_act(team):
    url, made, _ = team
    with httpx.Client(base_url=url, timeout=10) as c:
        run_id = c.post("/runs", json=ROLLOUT, headers=bearer(made["alice"])).json()["run_id"]
        assert c.get(f"/runs/{run_id}", headers=bearer(made["bob"])).status_code == 200
        for path, body in (("/runs", ROLLOUT), (f"/runs/{run_id}/approve", {"gate": "*"}), (f"/runs/{run_id}/abort", {})):
            r = c.post(path, json=body, headers=bearer(made["bob"]))
            assert r.status_code == 403 and "viewer" in r.json()["error"], path
        assert c.get(f"/runs/{run_id}", headers=bearer(made["bob"])).json()["approvals"] == []


def test_the_journal_records_the_tokens_name_not_the_clients_word(team, settings):
    url, made, _ = team
    with httpx.Client(base_url=url, headers=bearer(made["alice"]), timeout=10) as c:
        run_id = c.post("/runs", json=ROLLOUT).json()["run_id"]
        assert c.post(f"/runs/{run_id}/approve", json={"gate": "*", "by": "mallory"}).json()["approved_by"] == "alice"
        assert c.post(f"/runs/{run_id}/abort", json={"by": "mallory"}).status_code == 200
    db = sqlite3.connect(settings.journal_location())
    try:
        assert db.execute("SELECT approved_by FROM approvals WHERE run_id = ?", (run_id,)).fetchall() == [("alice",)]
        assert db.execute("SELECT requested_by FROM abort_requests WHERE run_id = ?", (run_id,)).fetchall() == [("alice",)]
    finally:
        db.close()


def test_removing_an_entry_revokes_its_token(team):
    url, made, tokens = team
    assert httpx.get(f"{url}/runs", headers=bearer(made["bob"]), timeout=10).status_code == 200
    text = tokens.read_text()
    kept = [line for line in text.split("- name: ") if not line.startswith("bob")]
    tokens.write_text("- name: ".join(kept))
    assert httpx.get(f"{url}/runs", headers=bearer(made["bob"]), timeout=10).status_code == 401
    assert httpx.get(f"{url}/runs", headers=bearer(made["alice"]), timeout=10).status_code == 200
    tokens.write_text("tokens: [")  # a broken file accepts nobody until it is fixed (fail closed): 503,
    # the server's fault to fix, never a 401 that sends every operator to check a token that is fine
    assert httpx.get(f"{url}/runs", headers=bearer(made["alice"]), timeout=10).status_code == 503


def test_serve_token_add_prints_a_token_once_and_stores_its_hash(tmp_path):
    from typer.testing import CliRunner

    from orchestrator.cli import app

    tokens = tmp_path / "t.yaml"
    r = CliRunner().invoke(app, ["serve", "token", "add", "carol", "--role", "viewer", "--tokens-file", str(tokens)])
    assert r.exit_code == 0, r.output
    token = r.stdout.strip().splitlines()[0]
    check_token_strength(token)
    stored = tokens.read_text()
    assert token not in stored and "carol" in stored and "viewer" in stored
    assert (tokens.stat().st_mode & 0o777) == 0o600
    with pytest.raises(UserError, match="already has a token"):
        add_token(tokens, "carol", "operator")


# --------------------------------------------------------------------------- 9. the redactor


def test_the_servers_answers_hide_what_the_runs_redactor_holds(live, fake_execute):
    url, app = live
    run_secret = "env-map-value-7f3e9a1c5b2d4f6e8a0c"
    app.state.worker.session.redactor.add(run_secret)  # as a run adds its env map's values
    fake_execute.behaviours = [f"raise:leaked {run_secret} and {HOST_TOKEN}"]
    with httpx.Client(base_url=url, headers=AUTH, timeout=10) as c:
        run_id = c.post("/runs", json=ROLLOUT).json()["run_id"]
        d = wait_for(lambda: (x := c.get(f"/runs/{run_id}").json())["worker"]["status"] == "failed" and x, "fail")
        text = c.get(f"/runs/{run_id}").text
    assert "leaked ***" in d["worker"]["error"]
    assert run_secret not in text and HOST_TOKEN not in text


# --------------------------------------------------------------------------- fuzzing: never a 500

_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                     max_leaves=12)
_field = st.sampled_from(["action", "host", "tag", "runbook", "yes", "soak", "replica", "to_tag", "to_file",
                          "run_id", "retry", "gate", "by"])
_value = st.one_of(_json, st.sampled_from(["rollout", "rollback", "resume", "gpu02", "v0.0.300", "*", "0", "30m",
                                           "../x", "r1", "all", "NaN"]))
_bodies = st.one_of(st.dictionaries(_field, _value, max_size=6), _json)
_paths = st.sampled_from(["/runs", "/runs/x", "/runs/gpu02-20990101T0000-dead/approve", "/runs/%2e%2e/abort",
                          "/runs/\u0663/approve", "/healthz", "/metrics"])


def test_fuzzing_the_api_never_answers_500(live):
    url, _ = live
    statuses: list[int] = []
    client = httpx.Client(base_url=url, headers=AUTH, timeout=10)

    @hsettings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(method=st.sampled_from(["GET", "POST"]), path=_paths, body=_bodies,
           query=st.dictionaries(st.sampled_from(["host", "limit", "events_after"]), st.text(max_size=12), max_size=2))
    def probe(method: str, path: str, body: Any, query: dict[str, str]) -> None:
        if method == "GET":
            r = client.get(path, params=query)
        else:
            r = client.post(path, content=json.dumps(body).encode(), headers=JSON)
        statuses.append(r.status_code)
        assert r.status_code < 500 or r.status_code == 503 and path == "/healthz", (method, path, body, r.text)
        if r.status_code >= 400:
            err = r.json()["error"] if path not in ("/healthz",) else ""
            assert "\n" not in err and "Traceback" not in err

    try:
        probe()
    finally:
        client.close()
    assert len(statuses) >= 100
