"""Checks every request passes before a route sees it (a pure ASGI middleware, plus the JSON parser).

- **Host** must name this server (`--allowed-host`, the bind address, loopback names): a DNS
  rebinding page cannot talk to a server on someone's laptop. 400 otherwise.
- **State-changing methods** (anything but GET/HEAD/OPTIONS) need `Content-Type:
  application/json` (415): a browser cannot send that cross-site without a CORS preflight, which
  this server never grants. A foreign `Origin`, or `Sec-Fetch-Site: cross-site|same-site`, is a 403.
- **Token before body**: a state-changing request without a valid bearer token is a 401 before
  any byte of its body is read (and its connection is closed); a body must arrive within
  `BODY_TIMEOUT_S` (408). A GET's body is never read.
- **Body size**: at most `max_body` bytes (64 KiB), by Content-Length or as streamed: 413.
- **JSON** (`parse_json`): at most `MAX_JSON_DEPTH` levels (a 400, not a RecursionError 500),
  no NaN/Infinity constants.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestrator.util.exit_codes import ExitCode

MAX_BODY = 64 * 1024
#: Seconds a state-changing request's whole body may take to arrive (after its headers).
BODY_TIMEOUT_S = 10.0
MAX_JSON_DEPTH = 32
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(rb"[\[\]{}]")


class BadJson(ValueError):
    pass


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


def parse_json(raw: bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """`json.loads`, refusing nesting deeper than `max_depth` and NaN/Infinity (BadJson)."""
    depth = deepest = 0
    for m in _BRACKET.finditer(_STRING.sub(b'""', raw)):
        depth += 1 if m.group() in (b"[", b"{") else -1
        deepest = max(deepest, depth)
        if deepest > max_depth:
            raise BadJson(f"the request body nests deeper than {max_depth} levels")

    def no_constants(name: str) -> Any:
        raise BadJson(f"the request body is not JSON ({name} is not a JSON number)")

    try:
        return json.loads(raw, parse_constant=no_constants)
    except BadJson:
        raise
    except (ValueError, RecursionError):
        raise BadJson("the request body is not JSON") from None


class RequestGuard:
    """`authenticated(authorization header) -> bool`: checked before a state-changing request's
    body is read (a client without a valid token cannot hold the server with a slow body); the
    body must then arrive within `body_timeout_s` (408). Safe methods' bodies are never read."""

    def __init__(self, app: ASGIApp, *, allowed_hosts: Iterable[str], max_body: int = MAX_BODY,
                 authenticated: Callable[[str | None], bool] | None = None,
                 body_timeout_s: float = BODY_TIMEOUT_S) -> None:
        self.app = app
        self.allowed_hosts = frozenset(allowed_hosts)
        self.max_body = max_body
        self.authenticated = authenticated
        self.body_timeout_s = body_timeout_s

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
        if self.authenticated is not None and not self.authenticated(Headers(scope=scope).get("authorization")):
            # before any byte of the body: a client without a token gets nothing held for it
            await _answer(401, "missing or wrong bearer token (ORCHESTRATOR_SERVER_TOKEN)", scope, receive, send)
            return
        body: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.body_timeout_s):
                while True:
                    message = await receive()
                    if message["type"] != "http.request":
                        return  # the client went away
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.max_body:
                        await _answer(413, f"the request body is larger than {self.max_body} bytes", scope, receive, send)
                        return
                    body.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            await _answer(408, f"the request body did not arrive within {self.body_timeout_s:g} s", scope, receive, send)
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
            if int(length) > self.max_body:
                return 413, f"the request body is larger than {self.max_body} bytes"
        return None


async def _answer(status: int, message: str, scope: Scope, receive: Receive, send: Send) -> None:
    headers = {"Connection": "close"} if status in (401, 408, 413) else {}
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    response = JSONResponse({"error": message, "exit_code": int(ExitCode.BAD_INPUT)}, status_code=status,
                            headers=headers or None)
    await response(scope, receive, send)
