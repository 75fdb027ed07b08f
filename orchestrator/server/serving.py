"""Serving the app with uvicorn, safely on a shared network.

Rules (`check_exposure`):
- a bind that is not loopback needs TLS (`--tls-cert`/`--tls-key`): the bearer token must not
  cross a network in cleartext; `--insecure-plaintext-on-network` is the explicit, named override
  (e.g. behind a TLS-terminating proxy on the same host);
- `--insecure-no-auth` is for a loopback bind only, without exception.

Limits (`build_server`): idle keep-alive connections close after `KEEP_ALIVE_S`; request headers
must arrive within `HEADER_TIMEOUT_S` (a slow-loris connection is closed); h11 buffers at most
`MAX_HEADER_BYTES` of an incomplete request; a TLS handshake must finish within
`HEADER_TIMEOUT_S` too (asyncio's default is 60 s); one client address holds at most
`MAX_CONNECTIONS_PER_ADDRESS` connections (beyond that its new connection gets a 503 and is
closed); at most `MAX_CONNECTIONS` connections at once in all (beyond that, 503). A state-changing
request's body is read only after its token is checked, within `guards.BODY_TIMEOUT_S`. The
access log never shows query strings. Figures: docs/team-mode.md, from bench/server_load.py.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path
from typing import Any

from orchestrator.server.guards import is_loopback
from orchestrator.util.user_errors import UserError

KEEP_ALIVE_S = 5
HEADER_TIMEOUT_S = 10.0
MAX_HEADER_BYTES = 16 * 1024
#: Connections (and requests in flight) at once, all clients together: beyond it, 503. Held
#: connections cost a file descriptor and a few KiB each, not a worker: this cap is there for the
#: descriptors (serve raises its soft RLIMIT_NOFILE to fit), not for throughput.
MAX_CONNECTIONS = 2048
#: Connections one client address may hold at once: beyond it the new connection gets a 503 and
#: is closed, so one address (slow bodies, half-sent headers, idle sockets) cannot take the server
#: from everyone else. A team behind one NAT address shares it: raise it with
#: --max-connections-per-address.
MAX_CONNECTIONS_PER_ADDRESS = 128

_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n"
         b"content-length: 76\r\n\r\n"
         b'{"error": "too many connections from your address", "exit_code": 2}        ')


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
    """A transport whose writes made in one turn of the event loop go out as one `send`.

    uvicorn's h11 protocol writes a response's head and its body separately: two system calls per
    answer, and on a busy machine the loopback `send` was the largest cost of a crowd's requests
    (bench/server_load.py). Everything but `write` and `close` is the wrapped transport's."""

    def __init__(self, transport: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(bytes(data))

    def _flush(self) -> None:
        if self._pending:
            data = b"".join(self._pending)
            self._pending.clear()
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _header_timeout_protocol(timeout_s: float, per_address: int = MAX_CONNECTIONS_PER_ADDRESS) -> type:
    """uvicorn's h11 protocol, closing a connection whose request headers take too long, and
    refusing (503, closed) a connection beyond `per_address` open ones from the same address."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    open_by_address: dict[str, int] = {}

    class HeaderTimeoutH11(H11Protocol):  # type: ignore[misc]
        header_timeout = timeout_s
        open_connections = open_by_address

        def connection_made(self, transport: Any) -> None:
            transport = _CoalescingTransport(transport, asyncio.get_running_loop())
            super().connection_made(transport)
            self._header_timer: asyncio.TimerHandle | None = None
            peer = transport.get_extra_info("peername")
            self._address: str | None = str(peer[0]) if isinstance(peer, (tuple, list)) and peer else None
            if self._address is not None:
                if open_by_address.get(self._address, 0) >= per_address:
                    self._address = None  # not counted: it goes at once
                    transport.write(_BUSY)
                    transport.close()
                    return
                open_by_address[self._address] = open_by_address.get(self._address, 0) + 1
            self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(self.header_timeout, self._headers_too_slow)

        def _disarm(self) -> None:
            if getattr(self, "_header_timer", None) is not None:
                self._header_timer.cancel()  # type: ignore[union-attr]
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            waiting = self.cycle is None or self.cycle.response_complete
            if waiting and not self.transport.is_closing():
                self.transport.close()

        def handle_events(self) -> None:
            before = self.cycle
            super().handle_events()
            if self.cycle is not before:
                self._disarm()  # a request's headers are complete

        def on_response_complete(self) -> None:
            self._arm()  # before: the next pipelined request may start inside
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            address, self._address = getattr(self, "_address", None), None
            if address is not None:
                left = open_by_address.get(address, 1) - 1
                if left > 0:
                    open_by_address[address] = left
                else:
                    open_by_address.pop(address, None)
            super().connection_lost(exc)

    return HeaderTimeoutH11


def build_server(app: Any, host: str, port: int, *, tls_cert: Path | None = None, tls_key: Path | None = None,
                 access_log: bool = True, log_level: str = "info", limit_concurrency: int = MAX_CONNECTIONS,
                 header_timeout_s: float = HEADER_TIMEOUT_S, keep_alive_s: int = KEEP_ALIVE_S,
                 per_address: int = MAX_CONNECTIONS_PER_ADDRESS) -> Any:
    """A uvicorn.Server for `app` with this module's limits (run it with `.run()` or `.run(sockets=)`)."""
    import uvicorn

    if (tls_cert is None) != (tls_key is None):
        raise UserError("--tls-cert and --tls-key go together")
    for what, path in (("--tls-cert", tls_cert), ("--tls-key", tls_key)):
        if path is not None and not Path(path).is_file():
            raise UserError(f"{what} {path}: no such file")
    config = uvicorn.Config(
        app, host=host, port=port, lifespan="on", log_level=log_level, access_log=access_log,
        timeout_graceful_shutdown=10, server_header=False, proxy_headers=False,
        timeout_keep_alive=keep_alive_s, limit_concurrency=limit_concurrency,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES, http=_header_timeout_protocol(header_timeout_s, per_address),
        ssl_certfile=str(tls_cert) if tls_cert else None, ssl_keyfile=str(tls_key) if tls_key else None,
    )
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, QueryStringFilter) for f in access.filters):
        access.addFilter(QueryStringFilter())
    return _server_class()(config, handshake_timeout_s=header_timeout_s)


def _server_class() -> type:
    import uvicorn

    class Server(uvicorn.Server):  # type: ignore[misc]
        """uvicorn's server with a TLS handshake timeout (asyncio's default is 60 s, and a
        connection in its handshake is not yet counted against its address's cap)."""

        def __init__(self, config: Any, *, handshake_timeout_s: float) -> None:
            super().__init__(config)
            self.handshake_timeout_s = handshake_timeout_s

        async def startup(self, sockets: Any = None) -> None:
            loop = asyncio.get_running_loop()
            original = loop.create_server
            timeout = self.handshake_timeout_s

            async def create_server(*args: Any, **kwargs: Any) -> Any:
                if kwargs.get("ssl") is not None:
                    kwargs.setdefault("ssl_handshake_timeout", timeout)
                return await original(*args, **kwargs)

            loop.create_server = create_server  # type: ignore[method-assign]
            try:
                await super().startup(sockets=sockets)
            finally:
                del loop.create_server  # the loop's own method again

    return Server


def raise_fd_limit(want: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE towards `want` (never above the hard limit)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = want if hard == resource.RLIM_INFINITY else min(want, hard)
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return target
        return soft
    except (ImportError, ValueError, OSError):
        return -1


def serve(settings: Any, host: str, port: int, token: str | None, *, insecure_no_auth: bool = False,
          session_factory: Any = None, tls_cert: Path | None = None, tls_key: Path | None = None,
          insecure_plaintext_on_network: bool = False, allowed_hosts: list[str] | None = None,
          tokens_file: Path | None = None, protect_metrics: bool = False, adopt: bool = True,
          max_connections_per_address: int = MAX_CONNECTIONS_PER_ADDRESS) -> None:
    """Run the app under uvicorn until SIGINT/SIGTERM (then running tasks are cancelled)."""
    from orchestrator.server.app import create_app

    check_exposure(host, tls=tls_cert is not None, insecure_no_auth=insecure_no_auth,
                   insecure_plaintext=insecure_plaintext_on_network)
    extra = list(allowed_hosts or [])
    if host in ("0.0.0.0", "::") and not extra:
        extra = [socket.gethostname(), socket.getfqdn()]
    app = create_app(settings, token=token, tokens_file=tokens_file, insecure_no_auth=insecure_no_auth,
                     session_factory=session_factory, allowed_hosts=extra, bind=host, protect_metrics=protect_metrics,
                     adopt=adopt)
    raise_fd_limit(MAX_CONNECTIONS + 256)
    server = build_server(app, host, port, tls_cert=tls_cert, tls_key=tls_key,
                          per_address=max_connections_per_address)
    _ = app.state.worker.session  # fail before binding the port: a wrong journal URL or inventory
    server.run()


__all__ = ["serve", "build_server", "check_exposure", "QueryStringFilter"]
