"""The cold-start watcher of the `logs:` step, pure: fed docker/ps rows, log windows, the time and,
when it asks, serving evidence, it returns verdicts; the handler (steps/logs.py) polls, feeds and
acts. One observation: `observe(now, row)` -> READ | decision | WAIT; `window(lines, gap)` -> ASK |
decision | WAIT; `evidence(verdict)` -> ASK | decision | WAIT. A decision is PASS, FAIL (with the
failing line when a line decided) or HALT (nothing stopped: a human judges). A verdict may carry
progress to journal (`journal`) and what the run page shows (`show`), handled before the verdict.

Rules:
- Every rank must log each per-rank milestone, then the ready line (hosts/log_gate.py). A forbidden
  line, or a rank's `rank_budget_bytes=` other than the runbook's, FAILs at once.
- A restart FAILs: a new container ID, a second startup line in one container, `restarting`, an exit.
- docker's log rotation may drop lines of a cold start. When lines went by unread (`Loss`), live
  evidence (rules/serving_evidence.py), asked only of an engine this run created or a resumed gate,
  stands in for them; at the deadline serving -> PASS, unknown -> HALT, not serving -> FAIL. Never a
  FAIL at the deadline for milestones that went by unread while the engine may serve. Lines are lost:
  - `Loss.START`: the first window has no startup line and is full, or docker says the engine ran
    longer than a whole cold start; with nothing live that says it serves, HALT at once;
  - `Loss.LINES`: a resumed gate's first window lacks its journaled last line; the follower
    reports a gap; or a first window of a gate not resumed has no startup line but what an engine
    logs only after its start (a milestone, the ready line, serving work).
- A gate resumed over the same container counts what it journaled as seen (`Journal`); a startup
  line in its first window other than the journaled one is a restart while no runner watched.
- A ready-line-only gate whose start rotated out PASSes when docker says the container runs, has run
  longer than a whole cold start, and its window shows it working with no failure line, unless the
  engine is known not to serve. Such a window that holds a failure line HALTs a gate that was not
  resumed (the line may be history); a resumed gate fails on it.
- Lines are judged raw (a secret equal to a milestone must not change a verdict). What is handed
  out to be shown is scrubbed (`scrub_lines`) together with the line before and after it (the
  previous window's last line before a window's first), so a secret split across two lines is
  hidden whole; the tail holds back a last line whose end may begin a secret (`may_begin_secret`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from orchestrator.engine.rules.serving_evidence import State, past_its_start, up_seconds
from orchestrator.engine.rules.serving_evidence import Verdict as Serving
from orchestrator.hosts.log_gate import LogGate
from orchestrator.hosts.parsers.docker_ps import Container

#: A gate's journal is saved at least this often while lines arrive; a milestone or start at once.
SAVE_EVERY_S = 60.0
#: The gate's verdict names at most this much of a line (a line can be a whole traceback).
LINE_CHARS = 200


def long_up(c: Container, cold_start_s: float) -> bool:
    """docker says it ran longer than a whole cold start: a window without its start lost it for good."""
    up = up_seconds(c.status)
    return up is not None and up >= cold_start_s


def line_hash(text: str) -> str:
    """How the journal names a line: a hash, never the text (a startup line carries the engine's arguments)."""
    return hashlib.sha256(text.strip().encode("utf-8", "replace")).hexdigest()[:16]


class Kind(StrEnum):
    READ = "read"  # feed the container's new log lines to `window`
    ASK = "ask"  # feed serving evidence (`live`: live evidence only) to `evidence`
    WAIT = "wait"  # observe again after a poll
    PASS = "pass"
    FAIL = "fail"
    HALT = "halt"


class Loss(StrEnum):
    """What of the cold start went by unread. Only ever grows: NONE -> LINES -> START."""

    NONE = "none"  # every line since the start was read or journaled: the lines decide
    LINES = "lines"  # lines rotated out unread: live evidence decides when they cannot
    START = "start"  # the start rotated out for good: live evidence, or HALT at once


class Step(StrEnum):
    """The call the watcher takes next (another raises `OutOfStep`)."""

    OBSERVE = "observe"
    WINDOW = "window"
    EVIDENCE = "evidence"
    DONE = "done"


class Question(StrEnum):
    #: a rotated-out start of a ready-line-only gate finished: does anything say it is NOT serving?
    #: (not live: the log's own evidence counts)
    FINISHED = "finished"
    #: lines were lost and new lines came: does live evidence say it serves?
    LIVE = "live"
    #: the deadline, with lines lost: live evidence decides the gate
    DEADLINE = "deadline"


#: What each answer decides (WAIT: the observation goes on). Unknown never fails a gate whose lines
#: went by unread, and never passes one on live evidence; at the deadline a human judges it.
ON_EVIDENCE: dict[tuple[Question, State], Kind] = {
    (Question.FINISHED, State.SERVING): Kind.PASS,
    (Question.FINISHED, State.UNKNOWN): Kind.PASS,
    (Question.FINISHED, State.NOT_SERVING): Kind.WAIT,
    (Question.LIVE, State.SERVING): Kind.PASS,
    (Question.LIVE, State.UNKNOWN): Kind.WAIT,
    (Question.LIVE, State.NOT_SERVING): Kind.WAIT,
    (Question.DEADLINE, State.SERVING): Kind.PASS,
    (Question.DEADLINE, State.UNKNOWN): Kind.HALT,
    (Question.DEADLINE, State.NOT_SERVING): Kind.FAIL,
}


class OutOfStep(Exception):
    def __init__(self, called: Step, expected: Step) -> None:
        super().__init__(f"the cold-start watcher was fed {called.value!r} while it expects {expected.value!r}")


@dataclass(frozen=True)
class Show:
    """What the run page shows of an observation: a heartbeat, the gate's latest line when it
    changed, the last lines read (both redacted)."""

    line: str | None = None
    tail: tuple[str, ...] = ()


@dataclass(frozen=True)
class Verdict:
    kind: Kind
    why: str = ""
    question: Question | None = None  # ASK
    live: bool = False  # ASK: only live evidence counts
    #: PASS: the container whose cold start was seen to its end (`RunContext.ready`)
    ready: str | None = None
    #: FAIL on a line: that line and the lines read after it (where a remedy's marker is looked for)
    line: str | None = None
    record: tuple[str, ...] = ()
    journal: dict[str, Any] | None = None  # progress to journal before acting (`RunContext.milestones`)
    show: Show | None = None


@dataclass
class Journal:
    """What a gate saw of one container's cold start (`RunContext.milestones[service]`: container,
    per_rank, once, and the hashes of the start and the last line read). `held`: what the journal
    held for this very container when the gate began."""

    held: dict[str, Any] = field(default_factory=dict)
    start: str = ""
    last: str = ""

    def seen_text(self) -> str:
        rec = self.held
        parts = [f"{p!r} from " + ", ".join(f"TP{r}" for r in sorted(ranks)) for p, ranks in (rec.get("per_rank") or {}).items() if ranks]
        parts += [repr(p) for p in rec.get("once") or []]
        return "; ".join(parts) if parts else "its startup line only" if rec.get("start") else "nothing yet"

    def restarted_in(self, lines: Sequence[str], startup: str) -> bool:
        """The window holds a startup line, and its last one is not the journaled one."""
        if not self.start:
            return False
        starts = [line_hash(t) for t in lines if startup in t]
        return bool(starts) and starts[-1] != self.start

    def lines_lost(self, lines: Sequence[str]) -> bool:
        """The journaled last line is not in the window: what was logged since rotated out unread."""
        if not self.last:
            return bool(self.held)
        return self.last not in {line_hash(t) for t in lines}


class ColdStartWatch:
    def __init__(self, *, service: str, gate: LogGate, startup: str, window: int, cold_start_s: float, now: float,
                 journaled: Mapping[str, Any] | None = None, created: Collection[str] = (),
                 scrub_lines: Callable[[Sequence[str]], list[str]] = list,
                 may_begin_secret: Callable[[str], bool] = lambda line: False) -> None:
        """`window`: the lines the first read asks for (a first window that long without a startup
        line lost its start); `journaled`: this service's `RunContext.milestones` record;
        `created`: the container IDs this run created."""
        self.service = service
        self.gate = gate
        self.startup = startup
        self.window_lines = window
        self.cold_start_s = cold_start_s
        self.deadline = now + cold_start_s
        self.created = frozenset(created)
        self.scrub_lines = scrub_lines
        self.may_begin_secret = may_begin_secret
        self._before: str | None = None  # the previous window's last line: context for the next one's first
        self._held = False  # `_before` was held out of the tail shown: it is shown with the next window
        self._gate_shown = ""  # the gate's latest line as shown (scrubbed with the lines around it)
        self.loss = Loss.NONE
        self.container: str | None = None  # the ID the gate watches (the first one listed; None: not listed yet)
        self.first_window = False  # listed; its first log window not judged yet
        self.starts = 0  # startup lines seen in this container (a journaled start counts)
        self.journal = Journal()
        self._journaled = dict(journaled) if journaled else {}
        self._saved_at = now
        self._saved_key = self._key()
        self._shown_line = ""  # the gate's line the run page shows (raw)
        self._step = Step.OBSERVE
        # the observation under way
        self._now = now
        self._row: Container | None = None
        self._lines: list[str] = []
        self._no_start = False  # a first window without a startup line
        self._question: Question | None = None
        self._finished = ""  # what says a rotated-out start finished (Question.FINISHED)
        self._pending_journal: dict[str, Any] | None = None
        self._pending_show: Show | None = None

    @property
    def resumed(self) -> bool:
        """The journal held this very container's progress."""
        return bool(self.journal.held)

    def progress(self) -> dict[str, Any]:
        return {"missing": self.gate.missing(), "seen": {p: [f"TP{i}" for i in sorted(r)] for p, r in self.gate.seen.items()},
                "last_line": self._gate_shown[:160]}

    def lost_for_good_text(self, status: str, read: int, more: str) -> str:
        seen = f"; seen before the resume: {self.journal.seen_text()}" if self.journal.held else ""
        return (f"{self.service}: its start scrolled out of the log window ({read} lines read; docker: {status}{seen}{more}), "
                f"so its milestones cannot be checked; nothing was stopped. Judge the engine by hand, then resume")

    def observe(self, now: float, row: Container | None) -> Verdict:
        """An observation at `now` with docker/ps's row of the service (None: not listed)."""
        self._take(Step.OBSERVE)
        if self._lines:
            self._before = self._lines[-1]
        self._now, self._row, self._lines = now, row, []
        if row is None:
            return self._at_deadline()  # nothing listed, nothing to read: only the clock decides
        if self.container is None:
            self.container = row.id
            self._restore(row.id)
            self.first_window = True
        if row.id != self.container:
            return self._decide(Kind.FAIL, f"{self.service} restarted during its cold start (container ID changed)")
        self._step = Step.WINDOW
        return Verdict(Kind.READ)

    def window(self, lines: Sequence[str], gap: bool = False) -> Verdict:
        """The lines read since the last window (the first: as much of the start as the log keeps);
        `gap`: lines went by between this read and the last."""
        self._take(Step.WINDOW)
        row = self._row
        assert row is not None
        lines = list(lines)
        self._lines = lines
        first = self.first_window
        self._no_start = no_start = first and not any(self.startup in t for t in lines)
        if first and self.resumed and self.journal.restarted_in(lines, self.startup):
            return self._decide(Kind.FAIL, f"{self.service} started again inside its container while no runner watched (its "
                                           f"startup line is not the one this run saw before)")
        if no_start and self.resumed and self.journal.start:
            self.starts = 1  # its start was seen before the resume: another startup line is a restart
        rotated = False
        if no_start and lines:
            for_good = len(lines) >= self.window_lines - 1 or long_up(row, self.cold_start_s)
            rotated = for_good or (self.resumed and self.journal.lines_lost(lines))
            if rotated:
                self._lose(Loss.START if for_good else Loss.LINES)
                finished = self._start_finished(row, lines)
                if finished is not None:
                    self._finished = finished
                    return self._ask(Question.FINISHED)
        if not first and gap and lines:
            self._lose(Loss.LINES)
        return self._judge_lines(rotated)

    def evidence(self, serving: Serving) -> Verdict:
        """The answer to the last ASK."""
        self._take(Step.EVIDENCE)
        question, self._question = self._question, None
        assert question is not None
        row = self._row
        assert row is not None
        then = ON_EVIDENCE[(question, serving.state)]
        if then is Kind.PASS:
            return self._passed_on(question, serving, row)
        if then is Kind.HALT:
            return self._decide(Kind.HALT, self.lost_for_good_text(row.status, 0, f"; live evidence: {serving.phrase()}"))
        if then is Kind.FAIL:
            return self._timed_out()
        if question is Question.FINISHED:
            return self._judge_lines(True)
        return self._after_live(f"; live evidence: {serving.phrase()}")

    def _judge_lines(self, rotated: bool) -> Verdict:
        row = self._row
        assert row is not None
        lines = self._lines
        forbidden = self.gate.forbidden
        if rotated and not self.resumed and any(bad in t for t in lines for bad in forbidden):
            return self._decide(Kind.HALT, self.lost_for_good_text(row.status, len(lines), ""))
        self.first_window = False
        for idx, text in enumerate(lines):
            if self.startup in text:
                self.starts += 1
                if self.starts > 1:
                    return self._decide(Kind.FAIL, f"{self.service} restarted inside its container during its cold start (a "
                                                   f"second startup line: {self._shown(idx, idx + 1)[0].strip()[:LINE_CHARS]})")
            gate_line = self.gate.result.line
            res = self.gate.feed(text)
            if res.failed:
                # the decisive evidence: this line and the other failure lines right after it (an
                # OOM's traceback names the exception a few lines below the first sign), quoted
                # from the window scrubbed whole
                after = lines[idx + 1:idx + 200]
                more = [j for j, x in enumerate(after, 1) if any(bad in x for bad in forbidden) and x.strip() != res.line][:2]
                shown = self._shown(idx, idx + 1 + (more[-1] if more else 0))
                evidence = " | ".join(shown[j].strip()[:300] for j in [0, *more])
                return self._decide(Kind.FAIL, f"{self.service}: {res.reason}: {evidence}", line=res.line,
                                    record=(res.line, *after))
            if res.passed:
                seen = f" (with what this run saw before its resume: {self.journal.seen_text()})" if self.resumed else ""
                return self._decide(Kind.PASS, f"{self.service}: {res.reason}{seen}", ready=row.id)
            if self.gate.result.line != gate_line:
                self._gate_shown = self._shown(idx, idx + 1)[0].strip()
        if (self._no_start and lines and not self.resumed
                and (self.gate.progressed or past_its_start(lines))):
            self._lose(Loss.LINES)  # the first window shows what follows a start, not the start
        self._pending_journal = self._note(lines)
        if self.loss is not Loss.NONE and lines and (self.resumed or row.id in self.created):
            return self._ask(Question.LIVE)
        return self._after_live("")

    def _after_live(self, live: str) -> Verdict:
        row = self._row
        assert row is not None
        lines = self._lines
        if self.loss is Loss.START and lines:
            return self._decide(Kind.HALT, self.lost_for_good_text(row.status, len(lines), live))
        self._pending_show = Show()  # the heartbeat; the lines are shown once the container's state passed
        line = self.gate.result.line
        if row.restarting:
            why = f"; {self.gate.result.reason}: {self._gate_shown[:LINE_CHARS]}" if self.gate.result.failed else (
                f"; last line: {self._gate_shown[:LINE_CHARS]}" if line else "")
            return self._decide(Kind.FAIL, f"{self.service} is restarting ({row.status}){why}")
        if row.state in ("exited", "dead"):
            return self._decide(Kind.FAIL, f"{self.service} exited during its cold start ({row.status}); last line: "
                                           f"{self._gate_shown[:LINE_CHARS]}")
        shown = None
        if lines and line and line != self._shown_line:
            self._shown_line = line
            shown = self._gate_shown[:LINE_CHARS]
        self._pending_show = Show(line=shown, tail=tuple(t[:300] for t in self._tail()))
        return self._at_deadline()

    def _at_deadline(self) -> Verdict:
        row = self._row
        if self._now < self.deadline:
            return self._verdict(Verdict(Kind.WAIT), Step.OBSERVE)
        if self.loss is not Loss.NONE and row is not None and (self.resumed or row.id in self.created):
            return self._ask(Question.DEADLINE)  # never time out blind
        return self._timed_out()

    def _passed_on(self, question: Question, serving: Serving, row: Container) -> Verdict:
        if question is Question.FINISHED:  # not a cold start seen to its end: `ready` stays unset
            return self._decide(Kind.PASS, f"{self.service}: {self._finished}; serving: {serving.state.value} ({serving.why})")
        seen = f"seen before: {self.journal.seen_text()}; " if question is Question.LIVE else ""
        return self._decide(Kind.PASS, f"{self.service}: lines of its cold start rotated out of its log unread ({seen}not in the "
                                       f"log now: {'; '.join(self.gate.missing())}), and live evidence says it serves: {serving.why}",
                            ready=row.id)

    def _timed_out(self) -> Verdict:
        return self._decide(Kind.FAIL, f"{self.service} did not finish its cold start within {int(self.cold_start_s // 60)} min; "
                                       f"missing: " + "; ".join(self.gate.missing()))

    def _take(self, called: Step) -> None:
        if called is not self._step:
            raise OutOfStep(called, self._step)

    def _lose(self, loss: Loss) -> None:
        self.loss = max(self.loss, loss, key=list(Loss).index)

    def _ask(self, question: Question) -> Verdict:
        self._question = question
        return self._verdict(Verdict(Kind.ASK, question=question, live=question is not Question.FINISHED), Step.EVIDENCE)

    def _decide(self, kind: Kind, why: str, **kw: Any) -> Verdict:
        return self._verdict(Verdict(kind, why, **kw), Step.DONE)

    def _verdict(self, v: Verdict, then: Step) -> Verdict:
        """`v` with the journal and show pending from this observation, handed over once."""
        self._step = then
        journal, show = self._pending_journal, self._pending_show
        self._pending_journal = self._pending_show = None
        return replace(v, journal=journal, show=show)

    def _start_finished(self, row: Container, lines: Sequence[str]) -> str | None:
        """What says a rotated-out start of a ready-line-only gate finished (module doc), or None.
        A start that hangs logs no request, no batch, no health check."""
        if (self.gate.required_per_rank or not row.is_running or not long_up(row, self.cold_start_s)
                or any(bad in text for text in lines for bad in self.gate.forbidden) or not past_its_start(lines)):
            return None
        return (f"its start rotated out of its log (the last {len(lines)} lines hold no start and no failure line, and show it "
                f"answering health checks or serving) and docker "
                f"says it has run {row.status.removeprefix('Up ')} without a restart, longer than a whole cold start: its start "
                f"finished")

    def _restore(self, container: str) -> None:
        """Seed the gate with what the journal held of this very container's start."""
        rec = self._journaled
        if not rec or rec.get("container") != container:
            return
        self.journal.held = dict(rec)
        gate = self.gate
        for pattern, ranks in (rec.get("per_rank") or {}).items():
            if pattern in gate.seen:
                gate.seen[pattern].update(int(r) for r in ranks if int(r) < gate.ranks)
        gate.seen_once.update(p for p in rec.get("once") or [] if p in gate.required)
        self.journal.start = str(rec.get("start") or "")
        self.journal.last = str(rec.get("last") or "")
        self._saved_key = self._key()

    def _note(self, lines: Sequence[str]) -> dict[str, Any] | None:
        """The record to journal after `lines` were judged (None: nothing now; see SAVE_EVERY_S)."""
        if not lines or self.container is None:
            return None
        for t in lines:
            if self.startup in t:
                self.journal.start = line_hash(t)
        self.journal.last = line_hash(lines[-1])
        key = self._key()
        if key == self._saved_key and self._now - self._saved_at < SAVE_EVERY_S:
            return None
        self._saved_key, self._saved_at = key, self._now
        return {"container": self.container, "per_rank": {p: sorted(r) for p, r in self.gate.seen.items()},
                "once": sorted(self.gate.seen_once), "start": self.journal.start, "last": self.journal.last}

    def _read(self) -> list[str]:
        return ([self._before] if self._before is not None else []) + self._lines

    def _shown(self, start: int, end: int) -> list[str]:
        off = len(self._read()) - len(self._lines)
        return self._shown_read(start + off, end + off)

    def _shown_read(self, start: int, end: int) -> list[str]:
        """Lines `start:end` of `_read()`, scrubbed with the line before and after them."""
        read = self._read()
        lo, hi = max(0, start - 1), min(len(read), end + 1)
        out = self.scrub_lines(read[lo:hi])
        return out[start - lo:len(out) - (hi - end)]

    def _tail(self) -> list[str]:
        """The last 8 lines read, with a line held from the last window; a last line whose end may
        begin a secret is held for the next window."""
        read = self._read()
        first = max(len(read) - len(self._lines) - int(self._held), len(read) - 8)
        end = len(read)
        self._held = end > first and self.may_begin_secret(read[end - 1])
        return self._shown_read(first, end - int(self._held))

    def _key(self) -> tuple[Any, ...]:
        return (self.journal.start, tuple((p, tuple(sorted(r))) for p, r in self.gate.seen.items()),
                tuple(sorted(self.gate.seen_once)))
