"""The client of `orchestrate serve`: submit a run, then follow it by polling (the journal's
transitions plus the server's view of the runs it executes) until it ends; the run does not
depend on the follower. An `https://` server is verified against the system's CAs or only the
`ca` given (`--server-ca`). Only reads are retried; a submission is sent again only if the
connection was never made, so a retry cannot start a second run.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from orchestrator.util.clock import Clock, RealClock
from orchestrator.util.exit_codes import ExitCode
from orchestrator.util.user_errors import UserError

#: Worker statuses after which this server will not move the run any further.
STOPPED = ("failed", "refused", "finished")
#: Worker statuses after which the run may continue elsewhere (followed through the journal).
HANDED_OFF = ("fenced", "cancelled")
#: Worker events the follower shows; transitions come from the journal instead.
SHOWN_EVENTS = ("step_started", "waiting", "note", "effect", "log_line")
RETRY_STATUSES = (502, 503, 504)
#: Tries of each request, the first included.
ATTEMPTS = 4

Emit = Callable[[str, dict[str, Any]], None]


class ServerAnswer(Exception):
    """The server answered with an error: `status`, its one-line message and the exit code it names."""

    def __init__(self, status: int, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.status, self.message, self.exit_code = status, message, exit_code


class ServerUnreachable(Exception):
    """The server could not be reached (after retries). `connected`: a request may have reached
    it (anything but a refused or failed connection), so it may have acted on it."""

    def __init__(self, message: str, *, connected: bool = False) -> None:
        super().__init__(message)
        self.connected = connected


@dataclass
class FollowResult:
    run: dict[str, Any]
    #: "terminal": the run ended; "stopped": the server gave it up (worker failed/refused);
    #: "orphaned": unfinished and no runner holds its lease.
    reason: str


def ca_context(ca: Path) -> ssl.SSLContext:
    """A client TLS context that trusts only the CA certificate(s) in `ca`."""
    try:
        return ssl.create_default_context(cafile=str(ca))
    except (OSError, ssl.SSLError) as exc:
        raise UserError(f"--server-ca {ca}: not a readable PEM CA certificate ({type(exc).__name__})") from None


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, httpx.TransportError):
        return True
    return isinstance(exc, ServerAnswer) and exc.status in RETRY_STATUSES


def _answer_error(resp: httpx.Response) -> ServerAnswer:
    try:
        body = resp.json()
        message = str(body.get("error") or resp.reason_phrase)
        code = int(body.get("exit_code", ExitCode.UNEXPECTED))
    except (ValueError, AttributeError, TypeError):
        message = f"HTTP {resp.status_code} {resp.reason_phrase} ({resp.headers.get('content-type', 'no content type')})"
        code = int(ExitCode.UNEXPECTED)
    if resp.status_code == 401:
        code = int(ExitCode.BAD_INPUT)
    return ServerAnswer(resp.status_code, message, code)


class ServerClient:
    def __init__(self, base_url: str, token: str | None, *, transport: httpx.AsyncBaseTransport | None = None,
                 clock: Clock | None = None, ca: Path | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url.rstrip("/")
        verify: ssl.SSLContext | bool = ca_context(ca) if ca is not None else True
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=headers, transport=transport, timeout=30.0,
                                       verify=verify)
        self.clock = clock or RealClock()

    async def __aenter__(self) -> ServerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, *, retry_if: Callable[[BaseException], bool], **kw: Any) -> Any:
        async for attempt in AsyncRetrying(
            retry=retry_if_exception(retry_if),
            stop=stop_after_attempt(ATTEMPTS),
            wait=wait_exponential(multiplier=0.5, max=5),
            sleep=self.clock.sleep,
            reraise=True,
        ):
            with attempt:
                try:
                    resp = await self._http.request(method, path, **kw)
                except httpx.TransportError as exc:
                    if not retry_if(exc) or attempt.retry_state.attempt_number >= ATTEMPTS:
                        raise ServerUnreachable(f"cannot reach {self.base_url}: {type(exc).__name__}: {exc}",
                                                connected=not isinstance(exc, httpx.ConnectError)) from None
                    raise
                if resp.status_code >= 400:
                    raise _answer_error(resp)
                return resp.json()
        raise AssertionError("unreachable")  # pragma: no cover

    async def _get(self, path: str, **kw: Any) -> Any:
        return await self._call("GET", path, retry_if=_retryable, **kw)

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        # Sent again only when the connection was never made: the server cannot have acted.
        return await self._call("POST", path, retry_if=lambda e: isinstance(e, httpx.ConnectError), json=body)

    async def submit(self, body: dict[str, Any]) -> str:
        return str((await self._post("/runs", body))["run_id"])

    async def run(self, run_id: str, *, events_after: int = 0) -> dict[str, Any]:
        return await self._get(f"/runs/{run_id}", params={"events_after": events_after})

    async def runs(self, host: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"limit": limit} | ({"host": host} if host else {})
        return (await self._get("/runs", params=params))["runs"]

    async def approve(self, run_id: str, gate: str | None = None, by: str | None = None, now: bool = False) -> dict[str, Any]:
        """`gate` None: the server approves the gate the run waits at now (never `*` unless named)."""
        body: dict[str, Any] = {"by": by, "now": now} | ({"gate": gate} if gate else {})
        return await self._post(f"/runs/{run_id}/approve", body)

    async def signal(self, run_id: str, action: str, by: str | None = None) -> dict[str, Any]:
        """`action`: pause, continue or abort."""
        return await self._post(f"/runs/{run_id}/{action}", {"by": by})

    async def follow(self, run_id: str, emit: Emit, *, interval: float = 1.0) -> FollowResult:
        """Poll every `interval` seconds, emit what is new, return when the run needs no more watching."""
        last_seq = 0
        last_event = 0
        orphan = 0
        failed = 0
        handed_off = False
        finished_seen = False  # a "finished" worker over a run not yet terminal: read again once
        while True:
            try:
                run = await self.run(run_id, events_after=last_event)
                failed = 0
            except ServerUnreachable:
                failed += 1
                if failed >= 10:  # polls in a row that reached no server
                    raise
                await self.clock.sleep(interval)
                continue
            worker = run.get("worker")
            new: list[tuple[str, str, dict[str, Any]]] = []
            if worker is not None and not handed_off:
                for ev in worker.get("events", []):
                    if ev["seq"] > last_event:
                        last_event = ev["seq"]
                        if ev["event"] in SHOWN_EVENTS:
                            fields = {k: v for k, v in ev.items() if k not in ("seq", "event", "at")}
                            new.append((_iso(ev["at"]), ev["event"], {**fields, "at": _iso(ev["at"])}))
            for t in run.get("transitions", []):
                if t["seq"] > last_seq:
                    last_seq = t["seq"]
                    new.append((t["at"], "transition", {"seq": t["seq"], "state": t["from"], "event_name": t["event"],
                                                        "to": t["to"], "note": t["note"], "at": t["at"]}))
            for _, kind, fields in sorted(new, key=lambda x: _sort_key(x[0])):
                emit(kind, fields)
            if run.get("terminal"):
                return FollowResult(run, "terminal")
            status = (worker or {}).get("status")
            if status == "finished" and not finished_seen:
                # a run that ended between the answer's journal read and its worker read: read once more
                finished_seen = True
                continue
            if status in STOPPED:
                return FollowResult(run, "stopped")
            if status in HANDED_OFF and not handed_off:
                handed_off = True
                emit("note", {"text": worker.get("error") or f"the server stopped running {run_id}",
                              "at": datetime.now(UTC).isoformat()})
            running_here = status in ("starting", "running")
            orphan = orphan + 1 if (run.get("lease") is None and not running_here) else 0
            if orphan >= 2:  # two polls in a row: no runner, none here
                return FollowResult(run, "orphaned")
            await self.clock.sleep(interval)


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(float(epoch), UTC).isoformat()


def _sort_key(at: str) -> float:
    try:
        return datetime.fromisoformat(at).timestamp()
    except ValueError:
        return 0.0
