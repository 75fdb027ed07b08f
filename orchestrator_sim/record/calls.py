"""A record of every call the simulated systems receive, and the ASGI middleware that takes it.

In memory a call keeps its full body (the env map included: the invariant checker compares it to
the dashboard's). On disk (`calls.jsonl`, for crash tests in other processes) every env value is
replaced by its `sha256:` fingerprint; `check_invariants` accepts either form.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from threading import RLock
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send


def fingerprint(value: str) -> str:
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()


@dataclass
class RecordedCall:
    seq: int
    at: float  # simulation seconds when the request arrived
    server: str  # compose-manager, dashboard, peer-a, peer-b, inference, relay:8008, relay:8009
    method: str
    path: str
    body: Any  # parsed JSON, raw text, or None
    status: int | None = None
    outcome: str | None = None  # "http 200", "done:ok", "done:failed(1)", "cut:after-effect", ...
    query: dict[str, str] = field(default_factory=dict)
    effects: list[str] = field(default_factory=list)  # e.g. "orphan-removed:<container>"
    finished_at: float | None = None
    host: str = ""  # the simulated host whose server took the call (gpu02, gpu03, ...); "" = shared

    # -- what the invariant checker asks of a call -------------------------------------------
    @property
    def is_compose_up(self) -> bool:
        return self.server == "compose-manager" and self.method == "POST" and self.path == "/compose/up"

    @property
    def is_compose_down(self) -> bool:
        return self.server == "compose-manager" and self.method == "POST" and self.path == "/compose/down"

    @property
    def dry_run(self) -> bool:
        return bool(isinstance(self.body, dict) and self.body.get("dry_run"))

    @property
    def is_mutating(self) -> bool:
        """A call that may change the host: a compose/down, or a compose/up that is not a dry run."""
        return self.is_compose_down or (self.is_compose_up and not self.dry_run)

    def to_json(self, redact_env: bool = True) -> dict[str, Any]:
        d = asdict(self)
        if redact_env and isinstance(d["body"], dict) and isinstance(d["body"].get("env"), dict):
            d["body"]["env"] = {k: fingerprint(str(v)) for k, v in d["body"]["env"].items()}
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RecordedCall:
        return cls(**d)


class CallRecorder:
    def __init__(self, now: Callable[[], float], sink: Path | None = None) -> None:
        self._now = now
        self._lock = RLock()
        self._calls: list[RecordedCall] = []
        self._sink = sink

    def start(
        self, server: str, method: str, path: str, query: dict[str, str], body: Any, host: str = ""
    ) -> RecordedCall:
        at = self._now()  # before taking our lock: the clock's owner may be calling update()
        with self._lock:
            call = RecordedCall(
                seq=len(self._calls) + 1, at=at, server=server, method=method, path=path, body=body, query=query,
                host=host,
            )
            self._calls.append(call)
            self._write(call)
            return call

    def finish(self, call: RecordedCall, status: int | None, outcome: str | None = None) -> None:
        at = self._now()
        with self._lock:
            if call.status is None:
                call.status = status
            if outcome is not None:
                call.outcome = outcome
            elif call.outcome is None:
                call.outcome = f"http {status}" if status is not None else "no response"
            call.finished_at = at
            self._write(call)

    def update(self, call: RecordedCall, *, outcome: str | None = None, effects: list[str] | None = None) -> None:
        with self._lock:
            if outcome is not None:
                call.outcome = outcome
            if effects:
                call.effects.extend(effects)
            self._write(call)

    def snapshot(self) -> list[RecordedCall]:
        with self._lock:
            return [copy.deepcopy(c) for c in self._calls]

    def _write(self, call: RecordedCall) -> None:
        if self._sink is None:
            return
        with self._sink.open("a") as f:
            f.write(json.dumps(call.to_json(redact_env=True)) + "\n")


def load_calls(path: Path) -> list[RecordedCall]:
    """Calls from a calls.jsonl (each call is written when it arrives and again when it ends:
    the last line for a seq wins)."""
    by_seq: dict[int, RecordedCall] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                call = RecordedCall.from_json(json.loads(line))
                by_seq[call.seq] = call
    return [by_seq[k] for k in sorted(by_seq)]


class RecordingMiddleware:
    """Records every HTTP request an app receives (its body in full) and its response status.
    `host`: the simulated host the app belongs to ("" for the fleet's shared systems)."""

    def __init__(self, app: ASGIApp, recorder: CallRecorder, server: str, host: str = "") -> None:
        self.app = app
        self.recorder = recorder
        self.server = server
        self.host = host

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        raw = b"".join(chunks)
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode(errors="replace")
        from urllib.parse import parse_qsl

        query = dict(parse_qsl(scope.get("query_string", b"").decode()))
        call = self.recorder.start(self.server, scope["method"], scope["path"], query, body, self.host)
        scope.setdefault("state", {})["sim_call"] = call
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": raw, "more_body": False}
            return await receive()

        status: int | None = None

        async def capture(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                call.status = status
            await send(message)

        try:
            await self.app(scope, replay, capture)
        finally:
            self.recorder.finish(call, status)
