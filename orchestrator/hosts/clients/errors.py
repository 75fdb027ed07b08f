"""The client error taxonomy, and the mapping from HTTP answers and transport failures to it.

Every message is built from text scrubbed by the call's `Redactor` (a server's error may echo the
request). A body that is not JSON is only described (content type and size), never quoted, except
a `text/plain` 4xx body: the server's own message (8e07c35's 422 `Failed to deserialize ...`),
quoted scrubbed and clipped. Any 5xx is a `ServerError` whatever its body (an HTML 502 from a proxy
too: the retry policy needs the status), except `ComposeFailed` (docker compose itself refused:
deterministic, never retried). `MalformedResponse` is a 2xx answer not shaped as the API promises.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from orchestrator.hosts.redaction import Redactor

MAX_DETAIL_CHARS = 500


class ClientError(Exception):
    """A call to an external system failed. `system` names it, `detail` says why (scrubbed). The
    facts one kind carries (`Busy.in_flight`, `ComposeFailed.stderr`, `TransportError.request_sent`,
    `RequestInvalid.field`) are keywords; `status` defaults to the kind's `default_status`."""

    default_status: int | None = None

    def __init__(self, system: str, detail: str, *, status: int | None = None, in_flight: str = "", stderr: str = "",
                 request_sent: bool = True, field: str = "") -> None:
        self.system = system
        self.detail = detail
        self.status = self.default_status if status is None else status
        self.in_flight, self.stderr, self.request_sent, self.field = in_flight, stderr, request_sent, field
        super().__init__(f"{system}: {detail}")

    def __reduce__(self) -> tuple[Any, ...]:  # made again from (system, detail), then every attribute restored
        return (type(self), (self.system, self.detail), dict(self.__dict__))


class Unauthorized(ClientError):
    """401/403: missing or wrong token."""


class TagTooRecent(ClientError):
    """400 `tag too recent: ...`: the tag's commit has not cleared the age gate."""


class TagNotFound(ClientError):
    """400 `tag not found: ...`."""


class Busy(ClientError):
    """409: another docker operation is in progress on the host (the server refused; nothing done).
    `in_flight`: the text after `already in progress:`."""

    default_status = 409


class BadRequest(ClientError):
    """Any other 4xx: the server refused the request."""


class ServerError(ClientError):
    """5xx. On a mutating call the server may have acted: callers treat it as an unknown outcome."""

    default_status = 500


class ComposeFailed(ClientError):
    """500 `docker compose failed (exit N):\nstderr: ...`: the command ran and refused; retrying
    gives the same answer. `stderr` holds docker compose's own message (scrubbed)."""

    default_status = 500


class TransportError(ClientError):
    """Connect/read timeout, connection reset, ... `request_sent` is False only when nothing left us."""


class MalformedResponse(ClientError):
    """A 2xx answer that is not what the API promises (HTML, non-JSON, bad NDJSON line, bad field)."""


class RequestInvalid(ClientError, ValueError):
    """Our own validation refused to send the request. `field` names the offending field."""


class HostNotFound(ClientError):
    """The dashboard lists no instance for the host."""


class HostListedTwice(ClientError):
    """The dashboard lists the host more than once: which env map is the truth is unknowable."""


def _clip(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MAX_DETAIL_CHARS else text[:MAX_DETAIL_CHARS] + "..."


def describe_body(response: httpx.Response) -> str:
    """`text/html, 1234 bytes`."""
    ctype = response.headers.get("content-type", "no content type").split(";")[0].strip()
    return f"{ctype}, {len(response.content)} bytes"


def server_message(response: httpx.Response) -> str | None:
    """The `error` (or `detail`/`message`) text of a JSON error body, else None."""
    try:
        payload = json.loads(response.content)
    except ValueError:
        return None
    if isinstance(payload, dict):
        for key in ("error", "detail", "message"):
            value = payload.get(key)
            if isinstance(value, str):
                return value
            if isinstance(value, dict) and isinstance(value.get("message"), str):
                return value["message"]
    if isinstance(payload, str):
        return payload
    return None


#: The setting whose token each system checks: a refused token names what to fix.
TOKEN_VARIABLES = {
    "compose-manager": "ORCHESTRATOR_COMPOSE_MANAGER_TOKEN",
    "dashboard": "ORCHESTRATOR_DASHBOARD_TOKEN",
    "model-proxy": "ORCHESTRATOR_MODEL_PROXY_TOKEN",
    "inference": "ORCHESTRATOR_INFERENCE_TOKEN",
}


def error_for_status(system: str, response: httpx.Response, redactor: Redactor) -> ClientError:
    """The taxonomy error for a non-2xx answer (body already read)."""
    status = response.status_code
    raw = server_message(response)
    text = _clip(redactor.scrub(raw)) if raw is not None else None
    plain = response.headers.get("content-type", "").split(";")[0].strip().lower() == "text/plain"
    if text is None and 400 <= status < 500 and plain and response.content.strip():
        text = _clip(redactor.scrub(response.content.decode("utf-8", "replace")))
    shown = text if text is not None else f"non-JSON body ({describe_body(response)})"
    if status in (401, 403):
        fix = f" (check {TOKEN_VARIABLES[system]})" if system in TOKEN_VARIABLES else ""
        return Unauthorized(system, f"HTTP {status} unauthorized: {shown}{fix}", status=status)
    if status == 409:
        in_flight = text.split("in progress:", 1)[1].strip() if text and "in progress:" in text else ""
        return Busy(system, f"HTTP 409 busy: {shown}", in_flight=in_flight)
    if status == 400 and text is not None:
        lowered = text.lower()
        if lowered.startswith("tag too recent"):
            return TagTooRecent(system, text, status=status)
        if lowered.startswith("tag not found"):
            return TagNotFound(system, text, status=status)
    if 400 <= status < 500:
        return BadRequest(system, f"HTTP {status}: {shown}", status=status)
    if status == 500 and text is not None and text.startswith("docker compose failed"):
        stderr = text.split("stderr:", 1)[1].split("\n\nstdout:", 1)[0].strip() if "stderr:" in text else text
        return ComposeFailed(system, f"HTTP 500 docker compose failed: {stderr}", stderr=stderr)
    if status >= 500:
        return ServerError(system, f"HTTP {status}: {shown}", status=status)
    return MalformedResponse(system, f"unexpected HTTP {status}: {shown}", status=status)


NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol, httpx.LocalProtocolError)


def transport_error(system: str, exc: httpx.HTTPError, redactor: Redactor) -> TransportError:
    """A `TransportError` for an httpx failure, `request_sent` unless it is one of `NOT_SENT`."""
    what = type(exc).__name__
    text = _clip(redactor.scrub(str(exc))) if str(exc) else ""
    where = request_target(exc, redactor)
    return TransportError(system, f"{what}{' on ' + where if where else ''}{': ' + text if text else ''}",
                          request_sent=not isinstance(exc, NOT_SENT))


def request_target(exc: httpx.HTTPError, redactor: Redactor) -> str:
    """`GET https://host:port/path` of the failed request (no query, no credentials); '' when unknown."""
    try:
        request = exc.request
    except RuntimeError:  # an httpx error raised without a request
        return ""
    url = request.url
    port = f":{url.port}" if url.port else ""
    return redactor.scrub(f"{request.method} {url.scheme}://{url.host}{port}{url.path}")


def parse_json(system: str, response: httpx.Response) -> Any:
    """The JSON body of a 2xx answer, or `MalformedResponse` (the body described, never quoted)."""
    try:
        return json.loads(response.content)
    except ValueError:
        raise MalformedResponse(system, f"answer is not JSON ({describe_body(response)})", status=response.status_code) from None


def check_ok_envelope(system: str, payload: Any, redactor: Redactor) -> dict[str, Any]:
    """compose-manager's `{"status":"ok", ...}` envelope; `{"status":"error"}` becomes BadRequest."""
    if not isinstance(payload, dict):
        raise MalformedResponse(system, f"answer is a JSON {type(payload).__name__}, expected an object")
    if payload.get("status") == "error":
        message = payload.get("error")
        text = _clip(redactor.scrub(message)) if isinstance(message, str) else "no message"
        raise BadRequest(system, f"error answer with a 2xx status: {text}")
    return payload
