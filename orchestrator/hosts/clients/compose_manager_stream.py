"""Reading a compose-manager NDJSON stream (`compose/up`, `compose/down`) into a `StreamOutcome`.

Every line is scrubbed with its neighbours (`StreamLines`) before it is kept. Success or failure
is judged only from a well-formed `done` on a clean stream; anything else is "unknown" (the
command may have run: find out from `docker/ps`, never assume).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import structlog

from orchestrator.hosts.clients.compose_manager_request import SYSTEM
from orchestrator.hosts.clients.errors import transport_error
from orchestrator.hosts.redaction import Redactor

log = structlog.get_logger(__name__)


@dataclass
class StreamOutcome:
    status: Literal["success", "failure", "unknown"]
    exit_code: int | None
    lines: list[str] = field(default_factory=list)
    error: str | None = None
    #: A dry run's `{"event":"plan","plan":{"create","recreate","remove","unchanged"},...}`, scrubbed
    plan_event: dict[str, Any] | None = None


class StreamLines:
    """A stream's output lines scrubbed so that a secret split across two lines is found: each
    with the line before it and, when held, the one after it. A line is held (until the next line,
    event or `flush`) only when its end may begin a secret; every other line is released at once."""

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        #: the last raw lines, newest last (at most three: before, held, new)
        self.raw: list[str] = []
        self.held = False

    def push(self, data: str) -> list[str]:
        """Take one line; return the scrubbed lines released, in order."""
        out = []
        self.raw = [*self.raw, data][-3:]
        if self.held:
            out.append(self.redactor.scrub_lines(self.raw)[-2])
        self.held = self.redactor.may_begin_secret(data)
        if not self.held:
            out.append(self.redactor.scrub_lines(self.raw[-2:])[-1])
        return out

    def flush(self) -> list[str]:
        if not self.held:
            return []
        self.held = False
        return [self.redactor.scrub_lines(self.raw[-2:])[-1]]


async def consume_stream(response: httpx.Response, *, redactor: Redactor, idle_timeout_s: float) -> StreamOutcome:
    """Read the whole stream (closing the response)."""
    lines: list[str] = []
    problems: list[str] = []
    done: dict[str, Any] | None = None
    plan_event: dict[str, Any] | None = None
    events = 0
    line_no = 0
    output = StreamLines(redactor)

    def handle(raw: bytes) -> None:
        nonlocal done, events, line_no, plan_event
        line_no += 1
        text = raw.decode("utf-8", "replace").strip()
        if not text:
            return
        try:
            event = json.loads(text)
        except ValueError:
            problems.append(f"malformed NDJSON line {line_no} ({len(text)} chars, not JSON)")
            return
        if not isinstance(event, dict) or not isinstance(event.get("event"), str):
            problems.append(f"malformed NDJSON line {line_no} (no 'event' field)")
            return
        kind = event["event"]
        if done is not None and kind != "done":
            log.warning("compose.stream.after_done", line=line_no, kind=redactor.scrub(kind))
        if kind in ("stdout", "stderr"):
            data = event.get("data")
            if not isinstance(data, str):
                problems.append(f"malformed NDJSON line {line_no} ({kind} event without 'data' text)")
                return
            events += 1
            lines.extend(output.push(data))
            return
        lines.extend(output.flush())
        if kind == "done":
            if done is not None:
                problems.append(f"second 'done' event on line {line_no}")
            done = event
        elif kind == "plan":
            if plan_event is not None:
                problems.append(f"second 'plan' event on line {line_no}")
            plan_event = redactor.scrub_obj(event)
        else:
            log.debug("compose.stream.unknown_event", kind=redactor.scrub(kind), line=line_no)
        events += 1

    buffer = b""
    try:
        async for chunk in response.aiter_bytes():
            *complete, buffer = (buffer + chunk).split(b"\n")
            for raw in complete:
                handle(raw)
        if buffer:  # a last line without its newline: complete JSON is accepted, a cut one is malformed
            handle(buffer)
            buffer = b""
    except httpx.ReadTimeout:
        problems.append(f"no stream data for {idle_timeout_s:g} s (read timeout)")
    except httpx.HTTPError as exc:
        problems.append(f"stream broke: {transport_error(SYSTEM, exc, redactor).detail}")
    finally:
        await response.aclose()
    lines.extend(output.flush())

    outcome = judge_stream(lines, problems, done, events)
    outcome.plan_event = plan_event
    return outcome


def judge_stream(lines: list[str], problems: list[str], done: dict[str, Any] | None, events: int) -> StreamOutcome:
    exit_code = None
    if done is not None:
        code = done.get("exit_code")
        exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
    if problems:
        return StreamOutcome("unknown", exit_code, lines, "; ".join(problems))
    if done is None:
        return StreamOutcome("unknown", None, lines, f"stream ended after {events} events without a 'done' event")
    success = done.get("success")
    if not isinstance(success, bool):
        return StreamOutcome("unknown", exit_code, lines, "'done' event without a boolean 'success'")
    if success and exit_code not in (0, None):
        return StreamOutcome("unknown", exit_code, lines, f"'done' says success with exit code {exit_code}")
    if success:
        return StreamOutcome("success", exit_code, lines)
    last = next((line for line in reversed(lines) if line.strip()), "")
    reason = f"docker compose failed (exit code {exit_code})"
    if last:
        reason += f"; last output: {last.strip()[:300]}"
    return StreamOutcome("failure", exit_code, lines, reason)
