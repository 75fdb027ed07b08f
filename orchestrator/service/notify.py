"""Team notifications: a webhook (`ORCHESTRATOR_NOTIFY_URL`, a secret) told when a run waits for
an approval, pauses, fails an observe-only gate, shows a canary readout, and ends. Nothing else: a
channel that talks at every step is a channel people mute.

- Never blocks the run: a message goes on a bounded queue (`put_nowait`; full: dropped, logged)
  and one sender task delivers it. A CLI run flushes for at most `FLUSH_S` when it ends.
- Retries connection errors, timeouts, 429 and 5xx (at most `ATTEMPTS`, `TIMEOUT_S` each); any
  other 4xx is final. Undeliverable: logged and dropped.
- Its text passes the run's redactor before it is queued: no token or env-map value leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import httpx
import structlog
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

QUEUE_SIZE = 64
ATTEMPTS = 4
TIMEOUT_S = 5.0
#: How long a CLI run waits, once it has ended, for its queued notifications to go out.
FLUSH_S = 2.0

_OUTCOME_WORD = {"DONE": "done", "ROLLED_BACK": "rolled back", "HALTED": "HALTED: a human must act",
                 "ABORTED": "aborted"}
_OUTCOME_MARK = {"DONE": ":white_check_mark:", "ROLLED_BACK": ":leftwards_arrow_with_hook:",
                 "HALTED": ":octagonal_sign:", "ABORTED": ":no_entry_sign:"}


class _Retryable(Exception):
    """A 429 or 5xx answer: worth another attempt."""


class Notifier:
    """A bounded queue and one sender task. `post` never blocks; `aclose` flushes for a bounded time."""

    def __init__(self, url: str, fmt: str = "slack", *, scrub: Callable[[str], str] = lambda s: s,
                 transport: httpx.AsyncBaseTransport | None = None, queue_size: int = QUEUE_SIZE,
                 backoff_s: float = 0.5) -> None:
        self.url, self.fmt, self.scrub, self.backoff_s = url, fmt, scrub, backoff_s
        self._transport = transport
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=queue_size)
        self._task: asyncio.Task[None] | None = None
        self._client: httpx.AsyncClient | None = None
        self.log = structlog.get_logger("orchestrator.notify")

    def post(self, message: dict[str, Any]) -> bool:
        """Queue one message (its `text` scrubbed here); False if the queue was full and it was dropped."""
        message = {k: (self.scrub(v) if isinstance(v, str) else v) for k, v in message.items()}
        try:
            self._queue.put_nowait(message)
        except asyncio.QueueFull:
            self.log.warning("notification_dropped", reason="queue full", run_id=message.get("run_id"))
            return False
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._sender(), name="notifier")
        return True

    def body(self, message: dict[str, Any]) -> dict[str, Any]:
        """The webhook's JSON: Slack-compatible `{"text": ...}`, or every field (`json`)."""
        if self.fmt == "slack":
            text = message["text"]
            if message.get("url"):
                text += f"\n<{message['url']}|open the run>"
            return {"text": text}
        return dict(message)

    async def _send(self, message: dict[str, Any]) -> None:
        if self._client is None:
            self._client = httpx.AsyncClient(transport=self._transport, timeout=TIMEOUT_S, follow_redirects=False)
        body = self.body(message)
        async for attempt in AsyncRetrying(stop=stop_after_attempt(ATTEMPTS),
                                           wait=wait_exponential(multiplier=self.backoff_s, max=8.0),
                                           retry=retry_if_exception_type((_Retryable, httpx.TransportError)), reraise=True):
            with attempt:
                r = await self._client.post(self.url, json=body)
                if r.status_code == 429 or r.status_code >= 500:
                    raise _Retryable(f"HTTP {r.status_code}")
                if r.status_code >= 400:
                    raise httpx.HTTPStatusError(f"HTTP {r.status_code}", request=r.request, response=r)

    async def _sender(self) -> None:
        while True:
            message = await self._queue.get()
            try:
                await self._send(message)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a notification must never take anything down
                # `event` is structlog's own argument (the log line's name): the run's event goes as `notification`
                self.log.warning("notification_failed", run_id=message.get("run_id"), notification=message.get("event"),
                                 error=self.scrub(f"{type(exc).__name__}: {exc}").replace(self.url, "<notify url>"))
            finally:
                self._queue.task_done()

    async def aclose(self, flush_s: float = FLUSH_S) -> None:
        """Deliver what is queued for at most `flush_s` seconds, then stop (the rest is dropped, logged)."""
        if self._task is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._queue.join(), timeout=flush_s)
            left = self._queue.qsize()
            if left:
                self.log.warning("notifications_not_delivered", count=left, reason=f"not out within {flush_s} s")
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None


class NotifyProgress:
    """A `Progress` that turns a run's `waiting` (for an approval) and `run_finished` events into messages."""

    def __init__(self, notifier: Notifier, *, run_id: str, host: str, kind: str, tag: str | None,
                 public_url: str = "") -> None:
        self.notifier = notifier
        self.run_id, self.host, self.kind, self.tag = run_id, host, kind, tag
        base = (public_url or "").strip().rstrip("/")  # the run's page on `orchestrate serve` (teamserver/pages.py)
        self.url = f"{base}/ui/runs/{run_id}" if base else None
        self._announced: set[str] = set()
        self._state: str | None = None

    def _what(self) -> str:
        return f"{self.host} {self.kind}" + (f" {self.tag}" if self.tag else "") + f" (run {self.run_id})"

    def event(self, kind: str, /, **fields: Any) -> None:
        try:
            if kind == "step_started":
                self._state = fields.get("state")
            elif kind == "waiting":
                gate = str(fields.get("gate") or "")
                # the soak gate names the command that ends it (orchestrator/engine/steps/gates.py)
                if "orchestrate approve" in gate and gate not in self._announced:
                    self._announced.add(gate)
                    self._post("waiting_for_approval", None,
                               f":raised_hand: {self._what()} waits for an approval at {self._state}: {gate}")
            elif kind == "observed" and not fields.get("passed"):
                self._post("observe_only_failed", None,
                           f":mag: {self._what()}: the observe-only gate {fields.get('state')} failed "
                           f"(the run goes on): {fields.get('note') or ''}".rstrip(": "))
            elif kind == "transition" and "canary readout:" in str(fields.get("note") or ""):
                # the readout table, whatever the verdict (a promoted canary is news too)
                note = str(fields.get("note"))
                table = note[note.index("canary readout:"):]
                self._post("canary_readout", None, f":bar_chart: {self._what()} at {fields.get('state')}:\n```\n{table}\n```")
            elif kind == "paused":
                self._post("paused", None, f":pause_button: {self._what()} paused by {fields.get('by')} "
                                           f"before {fields.get('state')}")
            elif kind == "run_finished":
                outcome = str(fields.get("outcome") or "")
                message = str(fields.get("message") or "")
                text = f"{_OUTCOME_MARK.get(outcome, '')} {self._what()} {_OUTCOME_WORD.get(outcome, outcome)}".strip()
                self._post("run_finished", outcome, text + (f": {message}" if message else ""))
        except Exception:  # noqa: BLE001 - notifying must never break the run
            pass

    def _post(self, event: str, outcome: str | None, text: str) -> None:
        self.notifier.post({"event": event, "run_id": self.run_id, "host": self.host, "kind": self.kind,
                            "tag": self.tag, "state": self._state, "outcome": outcome, "text": text, "url": self.url})
