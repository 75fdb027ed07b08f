"""Serving the app with uvicorn, safely on a shared network.

Exposure (`check_exposure`): a bind that is not loopback needs TLS, so the bearer token never
crosses a network in cleartext (`--insecure-plaintext-on-network` overrides it, e.g. behind a TLS
proxy on this host); `--insecure-no-auth` is for a loopback bind only.

Limits (`build_server`), so that clients without a token cannot deny the server to those with one:
each connection is admitted when accepted, before any TLS handshake (`guards.Admission`; refused:
a 503 and closed, or dropped over TLS); the handshake and each request's headers must come within
`HEADER_TIMEOUT_S`, idle keep-alive connections go after `KEEP_ALIVE_S` (both aborted at once);
heads beyond `MAX_HEADER_BYTES` get a 431 and the connection is aborted; `serve` fits the
connection cap to the open-file limit so accepting never hits EMFILE; error lines are rate-limited
(`RateLimitedLog`); with TLS every answer carries `Strict-Transport-Security`. Figures:
docs/team-mode.md, from bench/server_load.py.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.teamserver.guards import Admission, is_loopback
from orchestrator.util.user_errors import UserError

KEEP_ALIVE_S = 5
HEADER_TIMEOUT_S = 10.0
#: A graceful TLS close (after an answer with `Connection: close`) waits this long for the
#: client's close_notify (asyncio's default is 30 s, a slot held for nothing).
TLS_SHUTDOWN_TIMEOUT_S = 3.0
#: Request line and headers together, as docs/team-mode.md says: beyond it, 431.
MAX_HEADER_BYTES = 16 * 1024
#: Connections at once, all clients together (each costs a file descriptor and a few KiB).
MAX_CONNECTIONS = 2048
#: Unauthenticated connections one client address may hold at once: beyond it the new connection
#: gets a 503 and is closed. A team behind one NAT address shares it: raise it with
#: --max-connections-per-address.
MAX_CONNECTIONS_PER_ADDRESS = 128
#: Unauthenticated connections one network (/24, /64) may hold at once: one host has many
#: addresses (a whole /64 in IPv6), so a per-address cap alone does not bound it.
MAX_CONNECTIONS_PER_NETWORK = 256
#: Connections the kernel may queue before the server accepts them (each an open file once accepted).
BACKLOG = 512
#: Open files the process needs besides its client connections (journal, run logs, host clients).
FD_HEADROOM = 1024

_REFUSALS = {
    "address": "too many connections from your address",
    "network": "too many connections from your network",
    "busy": "the server is at its connection limit: try again later",
}


def _answer(status: bytes, message: str) -> bytes:
    """A JSON error answer as it goes on the wire, written before the connection goes."""
    body = json.dumps({"error": message, "exit_code": 2}).encode()
    return (b"HTTP/1.1 %s\r\ncontent-type: application/json\r\nconnection: close\r\n"
            b"content-length: %d\r\n\r\n%s" % (status, len(body), body))


def check_exposure(bind: str, *, tls: bool, insecure_no_auth: bool, insecure_plaintext: bool) -> None:
    """Refuse a configuration that exposes the token or the routes (UserError, exit 2)."""
    loopback = is_loopback(bind)
    if insecure_no_auth and not loopback:
        raise UserError(f"--insecure-no-auth is only allowed on a loopback bind (127.0.0.1, ::1), not {bind}")
    if not loopback and not tls and not insecure_plaintext:
        raise UserError(
            f"refusing to bind {bind} without TLS: the bearer token would cross the network in cleartext. "
            f"Pass --tls-cert and --tls-key (see docs/team-mode.md), or --insecure-plaintext-on-network "
            f"if a TLS proxy on this host terminates the connections"
        )


class QueryStringFilter(logging.Filter):
    """Drops the query string from uvicorn's access-log lines (a URL's query may hold anything)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str) and "?" in args[2]:
            record.args = (*args[:2], args[2].split("?", 1)[0], *args[3:])
        return True


class _CoalescingTransport:
    """A transport whose writes made in one turn of the event loop go out as one `send`: uvicorn
    writes a response's head and body separately, and the loopback `send` was the largest cost of a
    crowd's requests (bench/server_load.py). `abort` drops what is pending."""

    def __init__(self, transport: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))

    def flush(self) -> None:
        if self._pending:
            data = b"".join(self._pending)
            self._pending.clear()
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._pending.clear()
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class RateLimitedLog:
    """At most `burst` lines per `window_s` for each kind of line (its key); the first line let
    through after some were dropped says how many. A logging filter (uvicorn's error logger) and
    the event loop's exception handler, where running out of descriptors or buffers is one line
    without a traceback."""

    QUIET_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

    def __init__(self, logger: logging.Logger | None = None, *, window_s: float = 10.0, burst: int = 5,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger or logging.getLogger("uvicorn.error")
        self.window_s = window_s
        self.burst = burst
        self.clock = clock
        self._seen: dict[str, list[float]] = {}  # key -> [window start, lines in it, dropped since the last line]

    def allow(self, key: str) -> str | None:
        """None: drop this line; else what to add to it (how many like it were dropped before it)."""
        now = self.clock()
        seen = self._seen.get(key)
        if seen is None or now - seen[0] >= self.window_s:
            if len(self._seen) > 1000:  # bounded whatever the keys
                self._seen.clear()
            dropped = int(seen[2]) if seen is not None else 0
            self._seen[key] = [now, 1, 0]
        elif seen[1] < self.burst:
            seen[1] += 1
            dropped, seen[2] = int(seen[2]), 0
        else:
            seen[2] += 1
            return None
        return f" ({dropped} more like it dropped)" if dropped else ""

    def log(self, level: int, key: str, message: str) -> None:
        note = self.allow(key)
        if note is not None:
            self.logger.log(level, message + note)

    def filter(self, record: logging.LogRecord) -> bool:
        note = self.allow(f"{record.name}:{record.levelno}:{str(record.msg)[:100]}")
        if note:
            record.msg = str(record.msg) + note  # no '%' added: safe with or without args
        return note is not None

    def exception_handler(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message") or "unhandled exception in the event loop")
        exc = context.get("exception")
        note = self.allow(f"loop:{message[:100]}:{type(exc).__name__}")
        if note is None:
            return
        if isinstance(exc, OSError) and exc.errno in self.QUIET_ERRNOS:
            self.logger.error("%s: %s%s", message, exc.strerror or exc, note)
        else:
            self.logger.error("%s%s", message, note, exc_info=exc if isinstance(exc, BaseException) else None)


def _head_size(event: Any) -> int:
    """A request head's size as sent, at least (h11 strips the spaces around header values)."""
    return len(event.method) + len(event.target) + 14 + sum(len(n) + len(v) + 4 for n, v in event.headers)


def _guarded_protocol(admission: Admission, presents_token: Callable[[str | None], bool],
                      refusals: RateLimitedLog) -> type:
    """uvicorn's h11 protocol, admitting each connection when accepted and doing the TLS handshake
    itself (so that it is counted and timed)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Connection(h11.Connection):  # telling a head too large (431) from other malformed requests
        too_large = False

        def next_event(self) -> Any:
            try:
                event = super().next_event()
            except h11.RemoteProtocolError as exc:
                self.too_large = exc.error_status_hint == 431  # an incomplete head beyond the limit
                raise
            if isinstance(event, h11.Request) and _head_size(event) > MAX_HEADER_BYTES:
                self.too_large = True  # a complete one that came in one read
                raise h11.RemoteProtocolError("request head too large", error_status_hint=431)
            return event

    class GuardedH11(H11Protocol):
        header_timeout = HEADER_TIMEOUT_S

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.head = Connection(h11.SERVER, MAX_HEADER_BYTES)
            self.conn = self.head
            self._raw: Any = None  # the TCP transport
            self._out: _CoalescingTransport | None = None  # what uvicorn writes through (`transport`)
            self._started = False  # uvicorn's connection_made done (after the handshake over TLS)
            self._gone = False
            self._authenticated = False
            self._early: list[bytes] = []
            self._handshake_task: asyncio.Task[None] | None = None
            self._header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:  # the TCP connection, before any handshake
            self._raw = transport
            peer = transport.get_extra_info("peername")
            address = str(peer[0]) if isinstance(peer, (tuple, list)) and peer else ""
            tls = self.config.ssl
            decision = admission.arrive(self, address)
            for victim in decision.evict:
                victim.abort_now()
            if not decision.admit:
                self._gone = True
                refusals.log(logging.WARNING, f"refused:{decision.reason}",
                             f"connection from {address or 'a local socket'} refused: {_REFUSALS[decision.reason]}")
                if tls is None:
                    transport.write(_answer(b"503 Service Unavailable", _REFUSALS[decision.reason]))
                    transport.close()
                else:
                    transport.abort()  # no handshake for a refused connection: it is dropped
                return
            self._arm(self.header_timeout)  # the handshake and the first request's headers, together
            if tls is None:
                self._start(transport)
            else:
                transport.pause_reading()  # nothing is read until the handshake owns the socket
                self._handshake_task = self.loop.create_task(self._handshake(transport, tls))  # held: not collected

        async def _handshake(self, raw: Any, context: Any) -> None:
            try:
                transport = await self.loop.start_tls(raw, self, context, server_side=True,
                                                      ssl_handshake_timeout=self.header_timeout,
                                                      ssl_shutdown_timeout=TLS_SHUTDOWN_TIMEOUT_S)
            except (Exception, asyncio.CancelledError):  # failed, cut, evicted or timed out: gone
                self._forget()
                raw.abort()
                return
            if self._gone or transport is None:
                if transport is not None:
                    transport.abort()
                return
            self._start(transport)

        def _start(self, transport: Any) -> None:
            self._started = True
            self._out = _CoalescingTransport(transport, self.loop)
            super().connection_made(self._out)  # type: ignore[arg-type]  # a Transport by its methods
            early, self._early = self._early, []
            for data in early:
                self.data_received(data)

        def abort_now(self) -> None:
            """Evicted or timed out: the connection goes at once, its slot with it."""
            self._forget()
            if self._started:
                self.transport.abort()
            elif self._raw is not None:
                self._raw.abort()

        def _forget(self) -> None:
            self._gone = True
            self._disarm()
            admission.leave(self)

        def connection_lost(self, exc: Exception | None) -> None:
            self._forget()
            if self._started:
                super().connection_lost(exc)

        def _arm(self, delay: float) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(delay, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if not self._started or self.cycle is None or self.cycle.response_complete:
                self.abort_now()

        def timeout_keep_alive_handler(self) -> None:
            if not self.transport.is_closing():
                self.abort_now()

        def data_received(self, data: bytes) -> None:
            if not self._started:  # the TLS layer hands over what came with the handshake's end first
                self._early.append(data)
            elif not self._gone:  # after a 431 (aborted) what was still read is dropped
                super().data_received(data)

        def eof_received(self) -> None:
            if self._started:
                super().eof_received()

        def handle_events(self) -> None:
            before = self.cycle
            super().handle_events()
            if self.cycle is not before and not self._gone:  # a request's headers are complete
                self._disarm()
                header = next((bytes(v).decode("latin-1") for n, v in self.headers or () if n == b"authorization"), None)
                if not self._authenticated and presents_token(header):
                    self._authenticated = True
                    admission.authenticate(self)
                else:
                    admission.busy(self)

        def on_response_complete(self) -> None:
            if not self._gone:
                admission.idle(self)
                self._arm(self.header_timeout)  # before: the next pipelined request may start inside
            super().on_response_complete()

        def send_400_response(self, msg: str) -> None:
            if not self.head.too_large:
                super().send_400_response(msg)
                return
            self.transport.write(_answer(b"431 Request Header Fields Too Large",
                                         f"the request line and headers are larger than {MAX_HEADER_BYTES} bytes"))
            # sent now, then aborted (its slot free at once): no half-close or TLS shutdown for a flood of
            # oversized heads to hold slots with; a client still writing may read a reset instead of the 431
            if self._out is not None:
                self._out.flush()
            self.abort_now()

        def shutdown(self) -> None:
            if self._started:
                super().shutdown()

    return GuardedH11


def build_server(app: Any, host: str, port: int, *, tls_cert: Path | None = None, tls_key: Path | None = None,
                 access_log: bool = True, log_level: str = "info", limit_concurrency: int = MAX_CONNECTIONS,
                 per_address: int = MAX_CONNECTIONS_PER_ADDRESS, per_network: int | None = None,
                 reserve: int | None = None) -> Any:
    """A uvicorn.Server for `app` (from `create_app`) with this module's limits.

    `limit_concurrency`: connections at once in all; `reserve` of them (default an eighth) only for
    connections that presented a valid token; `per_network` is never below `per_address`."""
    import uvicorn

    if (tls_cert is None) != (tls_key is None):
        raise UserError("--tls-cert and --tls-key go together")
    for what, path in (("--tls-cert", tls_cert), ("--tls-key", tls_key)):
        if path is not None and not Path(path).is_file():
            raise UserError(f"{what} {path}: no such file")
    admission = Admission(total=limit_concurrency,
                          reserve=limit_concurrency // 8 if reserve is None else reserve,
                          per_network=max(per_network or MAX_CONNECTIONS_PER_NETWORK, per_address),
                          per_address=per_address)
    limiter = RateLimitedLog()
    protocol = _guarded_protocol(admission, app.state.auth.presents_valid_token, limiter)
    tls = tls_cert is not None
    config = uvicorn.Config(
        app, host=host, port=port, lifespan="on", log_level=log_level, access_log=access_log,
        timeout_graceful_shutdown=10, server_header=False, proxy_headers=False,
        timeout_keep_alive=KEEP_ALIVE_S, limit_concurrency=None, backlog=BACKLOG,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES, http=protocol,
        ssl_certfile=str(tls_cert) if tls_cert else None, ssl_keyfile=str(tls_key) if tls_key else None,
        # a browser that reached the page over TLS never tries it in cleartext again (a year)
        headers=[("Strict-Transport-Security", "max-age=31536000")] if tls else None,
    )
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, QueryStringFilter) for f in access.filters):
        access.addFilter(QueryStringFilter())
    errors = logging.getLogger("uvicorn.error")
    for old in [f for f in errors.filters if isinstance(f, RateLimitedLog)]:
        errors.removeFilter(old)
    errors.addFilter(limiter)

    class Server(uvicorn.Server):
        """Its listener leaves TLS to the protocol; its shutdown drops connections still in their handshake."""

        admission: Admission

        async def startup(self, sockets: Any = None) -> None:
            loop = asyncio.get_running_loop()
            loop.set_exception_handler(limiter.exception_handler)
            original = loop.create_server

            async def create_server(*args: Any, **kwargs: Any) -> Any:
                kwargs["ssl"] = None  # the protocol upgrades each admitted connection (config.ssl)
                return await original(*args, **kwargs)

            loop.create_server = create_server  # type: ignore[method-assign]  # the loop's own method wrapped for this one listener, restored after
            try:
                await super().startup(sockets=sockets)
            finally:
                del loop.create_server  # the loop's own method again

        async def shutdown(self, sockets: Any = None) -> None:
            for conn in admission.members():
                if not getattr(conn, "_started", True):
                    conn.abort_now()
            await super().shutdown(sockets=sockets)

    server = Server(config)
    server.admission = admission
    return server


def fd_budget(connections: int) -> int:
    """Open files to ask for: four times the connection cap, and never less than the cap plus the
    accept backlog plus `FD_HEADROOM` (so accepting never runs out of descriptors)."""
    return max(4 * connections, connections + BACKLOG + FD_HEADROOM)


def connections_for(fd_limit: int, wanted: int = MAX_CONNECTIONS) -> int:
    """The connection cap that fits an open-file limit (-1: unknown, keep `wanted`)."""
    if fd_limit < 0:
        return wanted
    return max(16, min(wanted, fd_limit - BACKLOG - FD_HEADROOM))


def raise_fd_limit(want: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE towards `want` (never above the hard limit); the
    soft limit after (-1: unknown)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return want
        target = want if hard == resource.RLIM_INFINITY else min(want, hard)
        if soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return target
        return soft
    except (ImportError, ValueError, OSError):
        return -1


def serve(settings: Any, host: str, port: int, token: str | None, *, insecure_no_auth: bool = False,
          tls_cert: Path | None = None, tls_key: Path | None = None, insecure_plaintext_on_network: bool = False,
          allowed_hosts: list[str] | None = None, max_connections_per_address: int = MAX_CONNECTIONS_PER_ADDRESS,
          **app_options: Any) -> None:
    """Run the app under uvicorn until SIGINT/SIGTERM (then running tasks are cancelled).
    `app_options`: create_app's (tokens file, protect_metrics, adopt)."""
    from orchestrator.teamserver.app import create_app

    check_exposure(host, tls=tls_cert is not None, insecure_no_auth=insecure_no_auth,
                   insecure_plaintext=insecure_plaintext_on_network)
    extra = list(allowed_hosts or [])
    if host in ("0.0.0.0", "::") and not extra:
        extra = [socket.gethostname(), socket.getfqdn()]
    app = create_app(settings, token=token, insecure_no_auth=insecure_no_auth, allowed_hosts=extra, bind=host,
                     **app_options)
    fd_limit = raise_fd_limit(fd_budget(MAX_CONNECTIONS))
    total = connections_for(fd_limit)
    if total < MAX_CONNECTIONS:
        app.state.worker.log.warning("connection_cap_lowered", connections=total, open_file_limit=fd_limit,
                                     detail="the hard open-file limit is too low for the default cap; raise it "
                                            "(ulimit -Hn, LimitNOFILE=, docker --ulimit nofile=) to serve more")
    server = build_server(app, host, port, tls_cert=tls_cert, tls_key=tls_key, limit_concurrency=total,
                          per_address=max_connections_per_address)
    _ = app.state.worker.session  # fail before binding the port: a wrong journal URL or inventory
    server.run()
