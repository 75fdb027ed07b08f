"""Checks every request passes before a route sees it (a pure ASGI middleware, plus the JSON parser).

- **Host** must name this server (`--allowed-host`, the bind address, loopback names), against
  DNS rebinding: 400.
- **State-changing methods** need `Content-Type: application/json` (415): a browser cannot send it
  cross-site without a CORS preflight, never granted here. A foreign `Origin` or a cross-site
  `Sec-Fetch-Site` is a 403.
- **Token before body**: without a valid bearer token a state-changing request is a 401 (a 503
  while the tokens file is refused) before any byte of its body is read; the body must arrive
  within `BODY_TIMEOUT_S` (408) and be at most `MAX_BODY` bytes (413). A GET's body is never read.
- **JSON** (`parse_json`): at most `MAX_JSON_DEPTH` levels (a 400, not a RecursionError 500), no NaN.
- **Connections** (`Admission`, used by serving.py): unauthenticated ones capped per address,
  per network and in total.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestrator.teamserver.errors import ApiError, error_response
from orchestrator.util.exit_codes import ExitCode

MAX_BODY = 64 * 1024
#: Seconds a state-changing request's whole body may take to arrive (after its headers).
BODY_TIMEOUT_S = 10.0
MAX_JSON_DEPTH = 32
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
#: The answer (503) while the tokens file is refused: the client's token may be fine, the server's file is not.
TOKENS_UNUSABLE = "the server cannot check tokens now: its tokens file is refused (the server's log says why)"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(rb"[\[\]{}]")


def is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(value: str) -> str:
    """`Host` header or URL netloc -> the lower-case name without port (IPv6 without brackets)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def allowed_host_set(bind: str | None, extra: Iterable[str] = ()) -> frozenset[str]:
    names = {host_name(h) for h in extra if h.strip()} | set(LOOPBACK_NAMES)
    if bind and bind not in ("0.0.0.0", "::", ""):
        names.add(host_name(bind) if not bind.count(":") > 1 else bind.lower())
    return frozenset(names)


def parse_json(raw: bytes) -> Any:
    """`json.loads`, refusing nesting deeper than `MAX_JSON_DEPTH` and NaN/Infinity (ApiError 400)."""
    depth = deepest = 0
    for m in _BRACKET.finditer(_STRING.sub(b'""', raw)):
        depth += 1 if m.group() in (b"[", b"{") else -1
        deepest = max(deepest, depth)
        if deepest > MAX_JSON_DEPTH:
            raise ApiError(400, f"the request body nests deeper than {MAX_JSON_DEPTH} levels", ExitCode.BAD_INPUT)

    def no_constants(name: str) -> Any:
        raise ApiError(400, f"the request body is not JSON ({name} is not a JSON number)", ExitCode.BAD_INPUT)

    try:
        return json.loads(raw, parse_constant=no_constants)
    except (ValueError, RecursionError):
        raise ApiError(400, "the request body is not JSON", ExitCode.BAD_INPUT) from None


@dataclass
class RequestGuard:
    """The token (`auth`: auth.Authenticator) is checked before a state-changing request's body is
    read: a client without a valid token cannot hold the server with a slow body."""

    app: ASGIApp
    allowed_hosts: frozenset[str]
    auth: Any

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        problem = self._check(scope)
        if problem is not None:
            status, message = problem
            await _answer(status, message, scope, receive, send)
            return
        if scope["method"] in SAFE_METHODS:
            await self.app(scope, receive, send)  # no route reads a GET's body: it is never read
            return
        if self.auth.authenticate(Headers(scope=scope).get("authorization")) is None:
            if self.auth.tokens_unusable():
                await _answer(503, TOKENS_UNUSABLE, scope, receive, send)
            else:
                await _answer(401, "missing or wrong bearer token (ORCHESTRATOR_SERVER_TOKEN)", scope, receive, send)
            return
        body: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(BODY_TIMEOUT_S):
                while True:
                    message = await receive()
                    if message["type"] != "http.request":
                        return  # the client went away
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > MAX_BODY:
                        await _answer(413, f"the request body is larger than {MAX_BODY} bytes", scope, receive, send)
                        return
                    body.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            await _answer(408, f"the request body did not arrive within {BODY_TIMEOUT_S:g} s", scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _check(self, scope: Scope) -> tuple[int, str] | None:
        headers = Headers(scope=scope)
        host = headers.get("host")
        if not host or host_name(host) not in self.allowed_hosts:
            return 400, "the Host header names no address this server answers for (see --allowed-host)"
        if scope["method"] not in SAFE_METHODS:
            origin = headers.get("origin")
            if origin is not None:
                parts = urlsplit(origin)
                if parts.scheme not in ("http", "https") or host_name(parts.netloc) not in self.allowed_hosts:
                    return 403, "cross-origin requests are refused"
            if headers.get("sec-fetch-site", "none").lower() not in ("none", "same-origin"):
                return 403, "cross-origin requests are refused"
            ctype = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if ctype != "application/json":
                return 415, "state-changing requests need Content-Type: application/json"
        length = headers.get("content-length")
        if length is not None:
            if not length.isascii() or not length.strip().isdigit():
                return 400, "malformed Content-Length"
            if int(length) > MAX_BODY:
                return 413, f"the request body is larger than {MAX_BODY} bytes"
        return None


async def _answer(status: int, message: str, scope: Scope, receive: Receive, send: Send) -> None:
    response = error_response(status, message, ExitCode.BAD_INPUT, close=status in (401, 408, 413, 503))
    await response(scope, receive, send)


def network_of(address: str) -> str:
    """The network a client address is counted in: its /24 for IPv4 (an IPv4-mapped IPv6 address
    too), its /64 for IPv6 (one host may hold a whole /64); anything else (a Unix socket's empty
    peer name) is its own bucket."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    prefix = 24 if ip.version == 4 else 64
    return str(ipaddress.ip_network(f"{ip}/{prefix}", strict=False))


@dataclass(frozen=True)
class Decision:
    """Admit or not (`reason`: the cap that refused: address, network, busy), and the connections
    to abort at once to make room (`evict`, already forgotten)."""

    admit: bool
    evict: tuple[Any, ...] = ()
    reason: str = ""


@dataclass
class _Member:
    address: str
    network: str
    authenticated: bool = False
    idle: bool = True


class Admission:
    """Which connections the server holds: pure bookkeeping, no I/O (the protocol acts on its answers).

    A connection is unauthenticated until one of its requests presents a valid token
    (`authenticate`); idle while it waits for a handshake or headers, busy while a request runs.
    Rules for an arriving connection:

    - its address holds at most `per_address` unauthenticated connections: beyond, refused;
    - its network (`network_of`: /24, /64) at most `per_network`: when full, the oldest idle
      connection of the network's busiest address makes room if that address holds at least two
      more than the newcomer's; otherwise refused;
    - all unauthenticated connections together at most `total - reserve` (the reserve is room only
      connections that presented a valid token take), and all connections at most `total` (the
      file descriptors): when full, the oldest idle connection of the busiest network makes room
      if that network holds at least two more than the newcomer's, else of the busiest address of
      the newcomer's own network on the same terms; otherwise refused.

    So a flood from a few networks cannot keep out a client from elsewhere, nor a client from
    another address of the flood's own network; authenticated connections are never evicted and
    count against `total` only."""

    def __init__(self, *, total: int, reserve: int, per_network: int, per_address: int) -> None:
        if not 0 <= reserve < total or per_network < 1 or per_address < 1:
            raise ValueError("Admission needs 0 <= reserve < total and positive per-network/per-address caps")
        self.total = total
        self.unauthenticated_cap = total - reserve
        self.per_network = per_network
        self.per_address = per_address
        self._members: dict[Any, _Member] = {}
        # unauthenticated connections per address and per network (a key at 0 goes: `_less`)
        self._by_address: Counter[str] = Counter()
        self._by_network: Counter[str] = Counter()
        self._addresses: dict[str, dict[str, None]] = {}  # network -> its addresses with unauthenticated connections
        self._idle: dict[str, dict[Any, None]] = {}  # address -> its idle unauthenticated connections, oldest first
        self._idle_by_network: Counter[str] = Counter()
        self.unauthenticated = 0
        self.authenticated = 0

    @property
    def open(self) -> int:
        return self.unauthenticated + self.authenticated

    def members(self) -> list[Any]:
        return list(self._members)

    def arrive(self, conn: Any, address: str) -> Decision:
        network = network_of(address)
        if self._by_address[address] >= self.per_address:
            return Decision(False, reason="address")
        victims: list[Any] = []
        if self._by_network[network] >= self.per_network:
            victim = self._victim_within(network, self._by_address[address])
            if victim is None:
                return Decision(False, reason="network")
            self.leave(victim)
            victims.append(victim)
        if self.unauthenticated >= self.unauthenticated_cap or self.open >= self.total:
            victim = self._victim_anywhere(network, address)
            if victim is None:
                return Decision(False, tuple(victims), "busy")
            self.leave(victim)
            victims.append(victim)
        self._members[conn] = _Member(address, network)
        self.unauthenticated += 1
        self._by_address[address] += 1
        self._by_network[network] += 1
        self._addresses.setdefault(network, {})[address] = None
        self._set_idle(conn, self._members[conn])
        return Decision(True, tuple(victims))

    def busy(self, conn: Any) -> None:
        member = self._members.get(conn)
        if member is not None and member.idle:
            self._unset_idle(conn, member)

    def idle(self, conn: Any) -> None:
        member = self._members.get(conn)
        if member is not None and not member.idle and not member.authenticated:
            self._set_idle(conn, member)

    def authenticate(self, conn: Any) -> None:
        member = self._members.get(conn)
        if member is None or member.authenticated:
            return
        self._forget_unauthenticated(conn, member)
        member.authenticated = True
        self.authenticated += 1

    def leave(self, conn: Any) -> None:
        member = self._members.pop(conn, None)
        if member is None:
            return
        if member.authenticated:
            self.authenticated -= 1
        else:
            self._forget_unauthenticated(conn, member)

    # ------------------------------------------------------------------ internals

    def _set_idle(self, conn: Any, member: _Member) -> None:
        member.idle = True
        self._idle.setdefault(member.address, {})[conn] = None
        self._idle_by_network[member.network] += 1

    def _unset_idle(self, conn: Any, member: _Member) -> None:
        member.idle = False
        _discard(self._idle, member.address, conn)
        _less(self._idle_by_network, member.network)

    def _forget_unauthenticated(self, conn: Any, member: _Member) -> None:
        if member.idle:
            self._unset_idle(conn, member)
        self.unauthenticated -= 1
        _less(self._by_address, member.address)
        _less(self._by_network, member.network)
        if member.address not in self._by_address:
            _discard(self._addresses, member.network, member.address)

    def _victim_within(self, network: str, newcomer: int) -> Any:
        """The oldest idle connection of `network`'s busiest address holding >= newcomer + 2."""
        best, best_count = None, newcomer + 1
        for address in self._addresses.get(network, ()):
            count = self._by_address[address]
            if count > best_count and address in self._idle:
                best, best_count = address, count
        return None if best is None else next(iter(self._idle[best]))

    def _victim_anywhere(self, network: str, address: str) -> Any:
        best, best_count = None, self._by_network[network] + 1
        for other, idle in self._idle_by_network.items():
            count = self._by_network[other]
            if idle and count > best_count:
                best, best_count = other, count
        if best is not None:
            return self._victim_within(best, -2)
        return self._victim_within(network, self._by_address[address])


def _less(counts: Counter[str], key: str) -> None:
    """One less of `key`; a key at 0 goes (the victim searches iterate the keys)."""
    counts[key] -= 1
    if counts[key] <= 0:
        del counts[key]


def _discard(groups: dict[str, dict[Any, None]], key: str, item: Any) -> None:
    """`item` out of `key`'s group; an empty group goes."""
    group = groups.get(key)
    if group is not None:
        group.pop(item, None)
        if not group:
            del groups[key]
