"""What a cold-start gate already saw, journaled, so a resumed gate does not need it again.

docker's log rotation keeps only an engine's last lines. An SGLang engine logs its per-rank
milestones (`rank_budget_bytes=`, `HiCache startup RAM allocated`) during its cold start; if the
orchestrator is down while the engine goes on logging, the start of the cold start may rotate out
of the log before the resumed gate reads it. So the gate journals, in the run's context
(`RunContext.milestones`, saved with `Runtime.save_context`), per service:

    {"container": id, "per_rank": {pattern: [ranks]}, "once": [patterns],
     "start": hash of the startup line seen, "last": hash of the last line read}

Rules (the gate, steps/gates.py `ColdStart`):
- A resumed gate over the *same container* starts from what was journaled: those milestones count
  as seen. Another container: nothing counts (its start is judged from its own log).
- A startup line in the resumed window that is not the journaled one: the engine started again
  inside its container while no runner watched -> the gate fails (as a second startup line does).
- The lines between the last journaled line and the resumed window are *lost* when the window no
  longer holds that line (or holds no startup line and is full, or docker says the engine has run
  longer than a whole cold start). Only then may live evidence of a ready engine (the one serving
  model, orchestrator/engine/serving_evidence.py: docker's health, the ready line in the window, the soak
  relay's /health, the peers) stand in for the milestones that rotated out; the window read is still
  judged for failure lines and a wrong `rank_budget_bytes`. Unknown never passes the gate.
Hashes, never lines: the journal holds no log text (a startup line carries the engine's arguments).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from orchestrator.hosts.log_gate import LogGate

if TYPE_CHECKING:
    from orchestrator.engine.executor.runtime import Runtime

#: A resumed gate's journal is saved at least this often (clock seconds) while lines arrive, so its
#: `last` line is recent; a milestone (or the startup line) is saved at once.
SAVE_EVERY_S = 60.0


def line_hash(text: str) -> str:
    return hashlib.sha256(text.strip().encode("utf-8", "replace")).hexdigest()[:16]


class ColdStartMemory:
    """The journaled progress of one service's cold-start gate (see the module docstring)."""

    def __init__(self, rt: "Runtime", service: str, startup: str) -> None:
        self.rt = rt
        self.service = service
        self.startup = startup
        self.container: str | None = None
        self.journaled: dict[str, Any] = {}  # what the journal held for this container when the gate began
        self.start: str = ""
        self.last: str = ""
        self._saved_at = rt.clock.monotonic()
        self._saved_key: tuple[Any, ...] = ()

    def restore(self, container: str, gate: LogGate) -> bool:
        """Seed `gate` with what this run saw of `container`'s cold start before (a resume). True
        when there was something for this very container."""
        self.container = container
        rec = self.rt.ctx.milestones.get(self.service)
        if not rec or rec.get("container") != container:
            return False
        self.journaled = dict(rec)
        for pattern, ranks in (rec.get("per_rank") or {}).items():
            if pattern in gate.seen:
                gate.seen[pattern].update(int(r) for r in ranks if int(r) < gate.ranks)
        gate.seen_once.update(p for p in rec.get("once") or [] if p in gate.required)
        self.start = str(rec.get("start") or "")
        self.last = str(rec.get("last") or "")
        self._saved_key = self._key(gate)
        return True

    def seen_text(self) -> str:
        """What the journal said was seen, for the gate's message."""
        rec = self.journaled
        parts = [f"{p!r} from " + ", ".join(f"TP{r}" for r in sorted(ranks)) for p, ranks in (rec.get("per_rank") or {}).items() if ranks]
        parts += [repr(p) for p in rec.get("once") or []]
        return "; ".join(parts) if parts else "its startup line only" if rec.get("start") else "nothing yet"

    def rotated_text(self, status: str, read: int, more: str) -> str:
        """The gate's halt: the start rotated out and nothing live says the engine serves."""
        seen = f"; seen before the resume: {self.seen_text()}" if self.journaled else ""
        return (f"{self.service}: its start scrolled out of the log window ({read} lines read; docker: {status}{seen}{more}), "
                f"so its milestones cannot be checked; nothing was stopped. Judge the engine by hand, then resume")

    def restarted_in_window(self, lines: Sequence[str]) -> bool:
        """The first resumed window holds a startup line other than the journaled one."""
        if not self.start:
            return False
        starts = [line_hash(t) for t in lines if self.startup in t]
        return bool(starts) and starts[-1] != self.start

    def lines_lost(self, lines: Sequence[str]) -> bool:
        """The journaled last line is no longer in the resumed window: what the engine logged in
        between rotated out unread."""
        if not self.last:
            return bool(self.journaled)
        return self.last not in {line_hash(t) for t in lines}

    def note(self, gate: LogGate, lines: Sequence[str]) -> None:
        """Lines the gate just fed: journal what changed (a milestone or the start at once, the
        last line at most every SAVE_EVERY_S)."""
        if not lines or self.container is None:
            return
        for t in lines:
            if self.startup in t:
                self.start = line_hash(t)
        self.last = line_hash(lines[-1])
        key = self._key(gate)
        now = self.rt.clock.monotonic()
        if key == self._saved_key and now - self._saved_at < SAVE_EVERY_S:
            return
        self.rt.ctx.milestones[self.service] = {
            "container": self.container, "per_rank": {p: sorted(r) for p, r in gate.seen.items()},
            "once": sorted(gate.seen_once), "start": self.start, "last": self.last}
        self.rt.save_context()
        self._saved_key = key
        self._saved_at = now

    def _key(self, gate: LogGate) -> tuple[Any, ...]:
        return (self.start, tuple((p, tuple(sorted(r))) for p, r in gate.seen.items()), tuple(sorted(gate.seen_once)))
