"""Denial of service without a token: each guard against a real uvicorn on loopback.

- a state-changing request without a valid token is answered 401 before its body is read (a
  slow or absent body holds nothing);
- an authenticated body must arrive within the body timeout (408);
- one client address holds at most `per_address` connections: beyond, 503 and closed at once,
  while another address is served;
- a TLS handshake is counted when the connection is accepted and timed; a connection timed out
  (handshake, headers) is aborted at once, over TLS too (its slot is free without a TLS shutdown);
- a request head beyond 16 KiB is a 431; with TLS every answer has HSTS;
- a world-writable or broken tokens file: the server does not start (one line naming it); one
  broken while serving: 503 for what needs a token and one log line, until it is fixed;
- error lines are rate-limited; the open-file limit leaves room above the connection cap.

Not timed: each socket read has a generous timeout, and what is asserted is the answer, which
without the guard never comes (the socket times out) or is another one. The flood as a whole:
tests/server/test_flood.py; the admission rules alone: tests/server/test_admission.py.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import ssl
import threading
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from helpers_server import AUTH, TOKEN, CountingAdmission, build_test_server, wait_for
from orchestrator.hosts.redaction import Redactor
from orchestrator.teamserver import guards, serving
from orchestrator.teamserver.app import create_app
from orchestrator.teamserver.auth import Authenticator, add_token
from orchestrator.teamserver.cli import run_serve
from orchestrator.teamserver.config import ServerRedactor
from orchestrator.teamserver.serving import (
    MAX_CONNECTIONS,
    MAX_HEADER_BYTES,
    RateLimitedLog,
    connections_for,
    fd_budget,
)


@pytest.fixture
def serve_app(monkeypatch):
    started: list[tuple[Any, threading.Thread]] = []

    def start(app: Any, **kw: Any) -> int:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        server = build_test_server(app, port, monkeypatch, **kw)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        wait_for(lambda: server.started, "uvicorn to start")
        started.append((server, thread))
        return port

    yield start
    for server, thread in started:
        server.should_exit = True
        thread.join(timeout=15)


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    s.settimeout(10)
    return s


def answer(s: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def post_head(token: str | None, length: int = 1000) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (f"POST /runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{auth}"
            f"Content-Length: {length}\r\n\r\n").encode()


def test_no_token_is_a_401_before_the_body(settings, serve_app, monkeypatch):
    monkeypatch.setattr(guards, "BODY_TIMEOUT_S", 600)
    port = serve_app(create_app(settings, token=TOKEN, adopt=False))
    for token in (None, "wrong-" + "x" * 40):
        s = connect(port)
        s.sendall(post_head(token) + b"{")  # one byte of a 1000-byte body, and nothing more
        head = answer(s)
        assert head.startswith(b"HTTP/1.1 401"), head
        assert b"connection: close" in head.lower()
        s.close()


def test_a_slow_body_with_a_token_ends_at_the_body_timeout(settings, serve_app, monkeypatch):
    monkeypatch.setattr(guards, "BODY_TIMEOUT_S", 0.5)
    port = serve_app(create_app(settings, token=TOKEN, adopt=False))
    s = connect(port)
    s.sendall(post_head(TOKEN) + b"{")
    head = answer(s)
    assert head.startswith(b"HTTP/1.1 408"), head
    s.close()


def test_one_address_cannot_take_the_server(settings, serve_app):
    port = serve_app(create_app(settings, token=TOKEN, adopt=False), per_address=3, header_timeout_s=60)
    held = [connect(port, "127.0.0.2") for _ in range(3)]
    for s in held:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # half-sent headers, held
    try:
        extra = connect(port, "127.0.0.2")
        head = answer(extra)
        assert head.startswith(b"HTTP/1.1 503"), head
        assert extra.recv(4096) == b"" or True
        extra.close()
        # everyone else is served meanwhile
        transport = httpx.HTTPTransport(local_address="127.0.0.1")
        with httpx.Client(transport=transport, timeout=10) as c:
            assert c.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
            assert c.get(f"http://127.0.0.1:{port}/runs", headers=AUTH).status_code == 200
    finally:
        for s in held:
            s.close()
    # the address's count goes down as its connections go
    def served() -> bool:
        with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=10) as c:
            return c.get(f"http://127.0.0.1:{port}/healthz").status_code == 200

    wait_for(served, "127.0.0.2 to be served again")


_secret = st.text(min_size=3, max_size=12)
_leaf = st.one_of(st.text(max_size=20), st.integers(), st.none(), st.booleans())


@hsettings(max_examples=200, deadline=None)
@given(secret=_secret, other=_secret, data=st.data())
def test_the_servers_scrub_of_an_answer_hides_what_one_redactor_with_every_secret_hides(secret, other, data):
    """ServerRedactor (its own secrets plus the attached runs' ones) must hide exactly what one
    redactor holding all of them hides: quotes, backslashes, control characters and non-ASCII in
    the secret included."""
    mixed = st.one_of(_leaf, st.builds(lambda a, b: a + secret + b, st.text(max_size=5), st.text(max_size=5)))
    obj = data.draw(st.recursive(mixed, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                               st.dictionaries(st.text(max_size=5) | st.just(secret),
                                                                               kids, max_size=4)), max_leaves=12))
    fast = ServerRedactor(secret)
    fast.attach(Redactor(other))
    slow = Redactor(secret, other)
    wrapped = {"runs": [obj]}
    assert fast.scrub_obj(wrapped) == slow.scrub_obj(wrapped)


def test_an_attached_secret_is_scrubbed_when_the_servers_own_secret_is_not_in_the_answer():
    """An attached redactor's secrets (a run's env map values) are scrubbed whether or not the
    server's own secret is in the answer."""
    fast = ServerRedactor("0000")
    fast.attach(Redactor("000"))
    assert fast.scrub_obj({"runs": ["000"]}) == Redactor("0000", "000").scrub_obj({"runs": ["000"]}) == {"runs": ["***"]}
    bare = ServerRedactor()  # no secret of its own, only attached ones
    bare.attach(Redactor("s3cr3t-value"))
    assert "s3cr3t-value" not in repr(bare.scrub_obj({"env": "x s3cr3t-value y"}))


def test_one_turn_of_writes_goes_out_in_one_send_and_close_flushes_first():
    import asyncio

    from orchestrator.teamserver.serving import _CoalescingTransport

    class Raw:
        def __init__(self) -> None:
            self.writes: list[bytes] = []
            self.closed = False

        def write(self, data: bytes) -> None:
            self.writes.append(data)

        def is_closing(self) -> bool:
            return self.closed

        def close(self) -> None:
            self.closed = True

        def get_extra_info(self, name: str) -> str:
            return f"info:{name}"

    async def main() -> Raw:
        raw = Raw()
        t = _CoalescingTransport(raw, asyncio.get_running_loop())
        t.write(b"HTTP/1.1 200 OK\r\n\r\n")
        t.write(b"")
        t.write(b'{"status": "ok"}')
        assert raw.writes == []  # not yet: at the end of this turn
        await asyncio.sleep(0)
        assert raw.writes == [b'HTTP/1.1 200 OK\r\n\r\n{"status": "ok"}']
        t.write(b"last")
        t.close()  # what was written before a close is sent before it
        assert raw.writes[-1] == b"last" and raw.closed
        assert t.get_extra_info("peername") == "info:peername"
        return raw

    asyncio.run(main())


def test_a_tls_handshake_that_never_comes_is_closed_at_the_header_timeout(settings, tls_files, monkeypatch):
    """Over TLS a connection is the protocol's (and its address's) only once its handshake is
    done: a client that opens one and never says hello is closed after the header timeout, not
    asyncio's 60 s."""
    cert_pem, key_pem, _ = tls_files
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = build_test_server(create_app(settings, token=TOKEN, adopt=False), port, monkeypatch,
                               tls_cert=cert_pem, tls_key=key_pem, header_timeout_s=0.5)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, "uvicorn to start")
        s = connect(port)  # no ClientHello, ever
        s.settimeout(20)
        assert s.recv(1024) == b""  # closed by the server (asyncio's default would be 60 s: a timeout here)
        s.close()
    finally:
        server.should_exit = True
        thread.join(15)


# --------------------------------------------------------------------------- TLS, heads, HSTS


@pytest.fixture
def running(monkeypatch):
    """start(app, **build_test_server kwargs) -> (server, port): a real uvicorn on loopback."""
    started: list[tuple[Any, threading.Thread]] = []

    def start(app: Any, **kw: Any) -> tuple[Any, int]:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        server = build_test_server(app, port, monkeypatch, **kw)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        wait_for(lambda: server.started, "uvicorn to start", timeout=15)
        started.append((server, thread))
        return server, port

    yield start
    for server, thread in started:
        server.should_exit = True
        thread.join(timeout=15)


def test_with_tls_every_answer_has_hsts_and_without_none(settings, running, tls_files):
    cert, key, ctx = tls_files
    _, port = running(create_app(settings, token=TOKEN, adopt=False), tls_cert=cert, tls_key=key)
    with httpx.Client(verify=ctx, timeout=10) as c:
        for r in (c.get(f"https://127.0.0.1:{port}/healthz"), c.get(f"https://127.0.0.1:{port}/runs"),
                  c.get(f"https://127.0.0.1:{port}/ui")):
            assert r.headers.get("strict-transport-security") == "max-age=31536000", r
    _, port = running(create_app(settings, token=TOKEN, adopt=False))
    assert "strict-transport-security" not in httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).headers


def _head(pad: int) -> bytes:
    return (f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: {'a' * pad}\r\n\r\n").encode()


@pytest.mark.parametrize("tls", [False, True])
def test_a_head_beyond_16_kib_is_a_431_and_one_within_is_served(settings, running, tls_files, tls):
    cert, key, ctx = tls_files
    kw = {"tls_cert": cert, "tls_key": key} if tls else {}
    server, port = running(create_app(settings, token=TOKEN, adopt=False), **kw)
    base = len(_head(0))

    def send(raw: bytes) -> bytes | None:
        """The answer's head; None when the server closed the connection before the client had
        sent it all (it answered 431 past 16 KiB and aborted while the client still wrote: a
        reset, or over TLS an EOF without the answer)."""
        s = connect(port)
        if tls:
            s = ctx.wrap_socket(s, server_hostname="127.0.0.1")
        try:
            s.sendall(raw)
            return answer(s) or None
        except (ssl.SSLError, ConnectionError):
            return None
        finally:
            s.close()

    assert (send(_head(MAX_HEADER_BYTES - base)) or b"").startswith(b"HTTP/1.1 200")  # exactly 16 KiB
    heads = [send(_head(size)) for size in (MAX_HEADER_BYTES - base + 1, 20 * 1024, 100 * 1024)]
    assert all(h is None or h.startswith(b"HTTP/1.1 431") for h in heads), [h and h[:80] for h in heads]
    assert any(h is not None for h in heads)  # a 431 was read, not only closed connections
    # half-sent: more than 16 KiB of a head that never ends is a 431 too, not held until the timeout
    s = connect(port)
    if tls:
        s = ctx.wrap_socket(s, server_hostname="127.0.0.1")
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * (MAX_HEADER_BYTES + 100))
    assert answer(s).startswith(b"HTTP/1.1 431")
    s.close()
    wait_for(lambda: server.admission.open == 0, "the refused connections to go", timeout=10)


def _until_closed(s: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (an EOF, a reset or a TLS EOF)."""
    data = b""
    try:
        while chunk := s.recv(4096):
            data += chunk
    except (ssl.SSLError, ConnectionError):
        pass
    return data


@pytest.mark.parametrize("tls", [False, True])
def test_after_a_431_the_connection_and_its_slot_are_gone_at_once(settings, running, tls_files, tls):
    """A head beyond the limit gets its 431 and the connection is aborted with it: its slot is free
    by the time the client sees the connection end (no lingering half-close, no TLS shutdown that
    waits for the client: set to 60 s here, as the header timeout)."""
    cert, key, ctx = tls_files
    kw = {"tls_cert": cert, "tls_key": key} if tls else {}
    server, port = running(create_app(settings, token=TOKEN, adopt=False), header_timeout_s=60, tls_shutdown_s=60,
                           **kw)
    for _ in range(3):
        s = connect(port)
        if tls:
            s = ctx.wrap_socket(s, server_hostname="127.0.0.1")
        try:
            # a head that never ends, past the limit: the server has read it all when it answers
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * (MAX_HEADER_BYTES + 100))
            assert _until_closed(s).startswith(b"HTTP/1.1 431")
            assert server.admission.open == 0  # left before the connection ended: no waiting here
        finally:
            s.close()


@pytest.mark.parametrize("tls", [False, True])
def test_a_timed_out_connection_is_aborted_at_once(settings, running, tls_files, tls):
    """A connection whose request headers do not come is aborted at the header timeout: its slot
    is free by the time the client sees the connection end, not after a TLS shutdown that waits
    for the client (set to 60 s here)."""
    cert, key, ctx = tls_files
    kw = {"tls_cert": cert, "tls_key": key} if tls else {}
    server, port = running(create_app(settings, token=TOKEN, adopt=False), header_timeout_s=0.5, tls_shutdown_s=60,
                           **kw)

    def opened() -> socket.socket:
        s = connect(port)
        return ctx.wrap_socket(s, server_hostname="127.0.0.1") if tls else s

    idle = opened()  # (the handshake done) then nothing
    half = opened()
    half.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # half-sent headers
    try:
        for s in (idle, half):
            assert _until_closed(s) == b""  # gone without an answer (over TLS without close_notify)
        assert server.admission.open == 0  # each left before its connection ended: no waiting here
    finally:
        idle.close()
        half.close()


def test_stalled_tls_handshakes_count_against_the_caps_and_are_timed(settings, running, tls_files, monkeypatch):
    cert, key, ctx = tls_files
    monkeypatch.setattr(serving, "Admission", CountingAdmission)
    server, port = running(create_app(settings, token=TOKEN, adopt=False), tls_cert=cert, tls_key=key,
                           header_timeout_s=1.0, per_address=3)
    stalled = [connect(port, "127.0.3.1") for _ in range(3)]  # no ClientHello, ever
    try:
        wait_for(lambda: server.admission.unauthenticated == 3, "the handshakes to be counted", timeout=10)
        extra = connect(port, "127.0.3.1")
        try:  # a fourth from the address: dropped at once (no handshake to answer in)
            assert extra.recv(1024) == b""
        except ConnectionResetError:
            pass
        extra.close()
        assert server.admission.refused.get("address", 0) >= 1
        with httpx.Client(verify=ctx, timeout=10) as c:  # others are served meanwhile
            assert c.get(f"https://127.0.0.1:{port}/runs", headers=AUTH).status_code == 200
        for s in stalled:  # each closed by the server at the header timeout
            s.settimeout(20)
            assert s.recv(1024) == b""
        wait_for(lambda: server.admission.open == 0, "the slots to be free", timeout=10)
    finally:
        for s in stalled:
            s.close()


# --------------------------------------------------------------------------- the tokens file


def test_a_world_writable_or_broken_tokens_file_stops_the_start_with_one_line(settings, tmp_path, capsys):
    tokens = tmp_path / "tokens.yaml"
    add_token(tokens, "alice", "operator")
    os.chmod(tokens, 0o666)
    assert run_serve("127.0.0.1", 0, None, settings, tokens_file=tokens) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(tokens) in err and "world-writable" in err
    os.chmod(tokens, 0o600)
    tokens.write_text("tokens: [")
    assert run_serve("127.0.0.1", 0, None, settings, tokens_file=tokens) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(tokens) in err and "not valid YAML" in err


def test_a_tokens_file_in_a_world_writable_directory_is_refused(settings, tmp_path, capsys):
    tokens_dir = tmp_path / "tokens_dir"
    tokens_dir.mkdir()
    tokens = tokens_dir / "tokens.yaml"
    add_token(tokens, "alice", "operator")
    os.chmod(tokens_dir, 0o777)
    try:
        assert run_serve("127.0.0.1", 0, None, settings, tokens_file=tokens) == 2
        assert "world-writable directory" in capsys.readouterr().err
        os.chmod(tokens_dir, 0o1777)  # sticky (as /tmp): others cannot replace it
        assert create_app(settings, tokens_file=tokens, adopt=False).state.auth.mode == "tokens-file"
    finally:
        os.chmod(tokens_dir, 0o700)


def test_a_tokens_file_refused_while_serving_answers_503_and_logs_one_line(settings, running, tmp_path, capsys):
    tokens = tmp_path / "tokens.yaml"
    alice = add_token(tokens, "alice", "operator")
    _, port = running(create_app(settings, tokens_file=tokens, adopt=False))
    url = f"http://127.0.0.1:{port}"
    bearer = {"Authorization": f"Bearer {alice}"}
    assert httpx.get(f"{url}/runs", headers=bearer, timeout=10).status_code == 200
    capsys.readouterr()
    good = tokens.read_text()
    for breaking in (lambda: tokens.write_text("tokens: ["), lambda: os.chmod(tokens, 0o666)):
        breaking()
        for _ in range(3):  # several requests: one log line
            r = httpx.get(f"{url}/runs", headers=bearer, timeout=10)
            assert r.status_code == 503 and "tokens file" in r.json()["error"], r.text
            assert str(tokens) not in r.text  # the path is the server's business
        r = httpx.post(f"{url}/runs", headers={**bearer, "content-type": "application/json"}, content=b"{}", timeout=10)
        assert r.status_code == 503  # the guard before the body says so too
        lines = [line for line in capsys.readouterr().err.splitlines() if "tokens_file_refused" in line]
        assert len(lines) == 1 and str(tokens) in lines[0], lines
        os.chmod(tokens, 0o600)
        tokens.write_text(good)
        assert httpx.get(f"{url}/runs", headers=bearer, timeout=10).status_code == 200
        assert "tokens_file_usable" in capsys.readouterr().err


# --------------------------------------------------------------------------- logging, file limit


def test_error_lines_are_rate_limited_and_out_of_files_has_no_traceback():
    now = [0.0]
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("test.ratelimit")
    logger.propagate = False
    logger.addHandler(Keep())
    limiter = RateLimitedLog(logger, window_s=10, burst=2, clock=lambda: now[0])
    exc = OSError(errno.EMFILE, "Too many open files")
    for _ in range(1000):  # a tight accept loop failing
        limiter.exception_handler(None, {"message": "socket.accept() out of system resource", "exception": exc})  # type: ignore[arg-type]
    assert len(records) == 2 and all(r.exc_info is None for r in records)
    assert "Too many open files" in records[0].getMessage()
    now[0] = 11.0
    limiter.exception_handler(None, {"message": "socket.accept() out of system resource", "exception": exc})  # type: ignore[arg-type]
    assert len(records) == 3 and "998 more like it dropped" in records[-1].getMessage()
    # other errors keep their traceback, under the same limit
    limiter.exception_handler(None, {"message": "boom", "exception": ValueError("x")})  # type: ignore[arg-type]
    assert records[-1].exc_info is not None
    # as a filter: uvicorn's per-connection warnings
    rec = lambda: logging.LogRecord("uvicorn.error", 30, "", 0, "Invalid HTTP request received.", (), None)  # noqa: E731
    passed = [limiter.filter(rec()) for _ in range(50)]
    assert passed.count(True) == 2


def test_the_file_limit_leaves_room_above_the_connection_cap():
    assert fd_budget(MAX_CONNECTIONS) >= 4 * MAX_CONNECTIONS
    assert connections_for(fd_budget(MAX_CONNECTIONS)) == MAX_CONNECTIONS
    assert connections_for(-1) == MAX_CONNECTIONS
    low = connections_for(2304)  # a hard limit serve cannot raise: the cap shrinks to fit under it
    assert 16 <= low < 2304 - 512


def test_a_connection_that_presents_a_valid_token_leaves_the_unauthenticated_count(settings, running):
    server, port = running(create_app(settings, token=TOKEN, adopt=False), header_timeout_s=60)
    admission = server.admission
    with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.5.1"), timeout=10) as c:
        assert c.get(f"http://127.0.0.1:{port}/healthz").status_code == 200  # no token: still unauthenticated
        assert (admission.unauthenticated, admission.authenticated) == (1, 0)
        assert c.get(f"http://127.0.0.1:{port}/runs", headers={"Authorization": "Bearer wrong-" + "x" * 40}).status_code == 401
        assert (admission.unauthenticated, admission.authenticated) == (1, 0)
        assert c.get(f"http://127.0.0.1:{port}/runs", headers=AUTH).status_code == 200  # same keep-alive connection
        assert (admission.unauthenticated, admission.authenticated) == (0, 1)
    wait_for(lambda: admission.open == 0, "the connection to go", timeout=10)


def test_only_a_real_token_counts_as_presented():
    assert Authenticator(token=TOKEN).presents_valid_token(f"Bearer {TOKEN}")
    assert not Authenticator(token=TOKEN).presents_valid_token("Bearer " + "y" * 40)
    assert not Authenticator(token=TOKEN).presents_valid_token(None)
    # without auth everyone is let in, and nobody holds a token: no room is kept for anyone
    assert not Authenticator(open_access=True).presents_valid_token(f"Bearer {TOKEN}")
