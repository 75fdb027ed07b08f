"""What the server knows of a run it executes beyond the journal (`ActiveRun`: its status, the
gate it waits at, its recent progress events and followed log lines), and the progress hooks that
feed it and the metrics from the executor (`ServerProgress`).
"""

from __future__ import annotations

import asyncio
import collections
import json
import time
from dataclasses import dataclass, field
from typing import Any

from orchestrator.language.machine import Table

#: How many progress events per run the worker keeps for followers.
KEEP_EVENTS = 200
#: How many lines of the followed log per run the worker keeps for the run page.
KEEP_TAIL = 40


@dataclass
class ActiveRun:
    """What this server knows about a run it executes (or executed) beyond the journal."""

    run_id: str
    host: str
    status: str = "starting"  # starting, running, finished, failed, refused, fenced, cancelled
    error: str | None = None
    outcome: str | None = None
    step: str | None = None
    waiting: str | None = None
    task: asyncio.Task[Any] | None = None
    #: who submitted it here (the token's name), or None (adopted, or not submitted here)
    by: str | None = None
    #: True when this server adopted it (its previous runner's lease expired)
    adopted: bool = False
    seq: int = 0
    events: collections.deque[dict[str, Any]] = field(default_factory=lambda: collections.deque(maxlen=KEEP_EVENTS))
    #: the last lines of the log the run follows (redacted by the executor and again here)
    tail: collections.deque[dict[str, Any]] = field(default_factory=lambda: collections.deque(maxlen=KEEP_TAIL))

    @property
    def active(self) -> bool:
        return self.status in ("starting", "running")

    def add_event(self, kind: str, fields: dict[str, Any]) -> None:
        self.seq += 1
        self.events.append({"seq": self.seq, "event": kind, "at": time.time(), **fields})

    def view(self, events_after: int = 0) -> dict[str, Any]:
        return {"status": self.status, "error": self.error, "outcome": self.outcome, "step": self.step,
                "adopted": self.adopted,
                "waiting": self.waiting, "events": [e for e in self.events if e["seq"] > events_after],
                "tail": list(self.tail)}


class ServerProgress:
    """The executor's progress hooks, turned into the worker's run view and into metrics."""

    def __init__(self, worker: Any, active: ActiveRun, table: Table) -> None:
        # `worker`: the server's Worker (orchestrator/teamserver/worker.py), which imports this module
        self.worker = worker
        self.active = active
        self.table = table
        self.step_state: str | None = None
        self.step_t0 = 0.0

    def event(self, kind: str, /, **fields: Any) -> None:
        # `kind` is positional-only, so no field an event carries can collide with it.
        try:
            self._event(kind, fields)
        except Exception as exc:  # noqa: BLE001 - watching a run must never break it
            self.worker.log.warning("progress_hook_failed", run_id=self.active.run_id, error=f"{type(exc).__name__}: {exc}")

    def _event(self, kind: str, fields: dict[str, Any]) -> None:
        now = self.worker.clock_now()
        if kind == "log_tail":
            scrub = self.worker.redactor.scrub
            for line in fields.get("lines") or []:
                self.active.tail.append({"service": scrub(str(fields.get("service", ""))), "line": scrub(str(line))})
            return
        if kind == "step_started":
            self.step_state, self.step_t0 = fields.get("state"), now
            self.active.step, self.active.waiting = fields.get("state"), None
        elif kind == "waiting":
            self.active.waiting = fields.get("gate")
        elif kind == "continued":
            self.active.waiting = None
        elif kind == "transition":
            state = fields.get("state")
            if state is not None and state == self.step_state:
                node = self.table.nodes.get(state)
                step_kind = node.step.kind if node is not None and node.step is not None else "none"
                self.worker.metrics.gate_wait.labels(kind=step_kind).observe(max(0.0, now - self.step_t0))
            self.step_state = None
            self.active.waiting = None
            self.worker.count_effects_soon(self.active.run_id)
        if kind == "note" and str(fields.get("text", "")).startswith("journal: "):
            # where the journal (its URL: user, host, port) and the run log live is the server's own
            # business: a viewer of this run never reads it
            fields = {**fields, "text": "the journal and the run's log are kept on the server"}
        # JSON-safe and scrubbed again (the executor already hands over redacted text only)
        self.active.add_event(kind, self.worker.redactor.scrub_obj(json.loads(json.dumps(fields, default=str))))


def step_durations(started: Any, transitions: list[Any]) -> dict[str, float]:
    """Seconds spent in each state (a state visited twice: the sum), from the journal's transitions."""
    out: dict[str, float] = {}
    prev = started
    for t in transitions:
        out[t.from_state] = out.get(t.from_state, 0.0) + max(0.0, (t.at - prev).total_seconds())
        prev = t.at
    return out


__all__ = ["KEEP_EVENTS", "KEEP_TAIL", "ActiveRun", "ServerProgress", "step_durations"]
