"""The worker of `orchestrate serve`: runs submissions as asyncio tasks in this process, each through
`runner.execute` exactly as the CLI's (same journal, host lease and executor). Rules:

- Every journal call the server makes runs in a worker thread, never on the event loop (the
  journals allow it: one connection, serialised by a lock; journal/sql.py).
- Submissions are prepared one at a time (an asyncio lock), admitted through the service's one
  admission path, and take the host's lease before they are answered: a busy host is a 409 to
  the submitter, not a run that fails later. Who submitted is journaled.
- The runbook is named, never a path; its identity (name, sha256) is recorded in the run's
  context and a resume loads exactly that content or is refused.
- A run that raises is left unfinished for `orchestrate resume`; on shutdown running tasks are
  cancelled and their leases left to expire.
- **Adoption** (`adopt_loop`): every third of the lease TTL, runs whose host lease expired (their
  runner is gone) are resumed here as `POST /runs {"action":"resume"}` would. Of two servers, the
  one that takes the lease wins; resume settles every journaled effect first, so no mutating call
  is sent twice. Not adopted: a run with no transition, or one that failed or was fenced on this
  server (no retry loop on a bug). An adopted run never keeps `--yes`.
- A person's signals go through the service's signals, as the CLI's; a run nobody drives is
  aborted from what the host shows (orchestrator/service/orphans.py).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import statistics
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import anyio.to_thread

from orchestrator.journal import audit
from orchestrator.journal.base import LeaseHeld, RunNotFound, RunRecord
from orchestrator.journal.owner import describe_owner
from orchestrator.language.machine import Table
from orchestrator.language.runbook import Runbook, default_runbook, load_recorded_runbook, load_runbook_checked
from orchestrator.service import signals
from orchestrator.service.activity import target_tag
from orchestrator.service.admission import admit_resume, admit_rollback, admit_rollout, resume_options, rollback_runbook
from orchestrator.service.notify import FLUSH_S
from orchestrator.service.refusals import refuse_if_leased
from orchestrator.service.requests import Admitted, ResumeRequest, RollbackRequest, RolloutRequest
from orchestrator.service.run_info import check_tag, context_summary

# `execute` is looked up here when a run starts (`Worker._run`): the tests replace it on this module
from orchestrator.service.runner import RunnerFenced, execute
from orchestrator.service.session import RUNBOOK_IDENTITY, RUNBOOK_TEXT, Session, notifier_for, owner_id
from orchestrator.teamserver.config import ServerRedactor
from orchestrator.teamserver.errors import ApiError
from orchestrator.teamserver.metrics import Metrics
from orchestrator.teamserver.schemas import ResumeBody, RollbackBody, RolloutBody
from orchestrator.util.exit_codes import OUTCOME_EXIT, ExitCode
from orchestrator.util.settings import Settings
from orchestrator.util.user_errors import Refused, UserError

SessionFactory = Callable[[Settings], Session]

#: How many finished runs the worker remembers (status, error) for GET /runs/{id}.
KEEP_FINISHED = 200
#: How many progress events per run the worker keeps for followers.
KEEP_EVENTS = 200
#: How many lines of the followed log per run the worker keeps for the run page.
KEEP_TAIL = 40
#: Seconds the journal's census behind /metrics is reused before it is read again.
METRICS_MAX_AGE_S = 10.0


@dataclass
class ActiveRun:
    """What this server knows about a run it executes (or executed) beyond the journal: the
    executor's progress hooks (`event`) keep it, and the metrics, up to date."""

    run_id: str
    host: str
    status: str = "starting"  # starting, running, finished, failed, refused, fenced, cancelled
    error: str | None = None
    outcome: str | None = None
    step: str | None = None
    waiting: str | None = None
    task: asyncio.Task[Any] | None = None
    #: True when this server adopted it (its previous runner's lease expired)
    adopted: bool = False
    seq: int = 0
    events: collections.deque[dict[str, Any]] = field(default_factory=lambda: collections.deque(maxlen=KEEP_EVENTS))
    #: the last lines of the log the run follows (redacted by the executor and again here)
    tail: collections.deque[dict[str, Any]] = field(default_factory=lambda: collections.deque(maxlen=KEEP_TAIL))
    #: the Worker and the run's Table, for the progress hooks
    worker: Any = None
    table: Any = None
    #: the step started last, and when (the gate-wait histogram), until its transition
    step_state: str | None = None
    step_t0: float = 0.0

    @property
    def active(self) -> bool:
        return self.status in ("starting", "running")

    def view(self, events_after: int = 0) -> dict[str, Any]:
        return {"status": self.status, "error": self.error, "outcome": self.outcome, "step": self.step,
                "adopted": self.adopted, "waiting": self.waiting,
                "events": [e for e in self.events if e["seq"] > events_after], "tail": list(self.tail)}

    def event(self, kind: str, /, **fields: Any) -> None:
        # `kind` is positional-only, so no field an event carries can collide with it.
        try:
            self._event(kind, fields)
        except Exception as exc:  # noqa: BLE001 - watching a run must never break it
            self.worker.log.warning("progress_hook_failed", run_id=self.run_id, error=f"{type(exc).__name__}: {exc}")

    def _event(self, kind: str, fields: dict[str, Any]) -> None:
        now = self.worker.session.clock.monotonic()
        if kind == "log_tail":
            scrub = self.worker.redactor.scrub
            for line in fields.get("lines") or []:
                self.tail.append({"service": scrub(str(fields.get("service", ""))), "line": scrub(str(line))})
            return
        if kind == "step_started":
            self.step_state, self.step_t0 = fields.get("state"), now
            self.step, self.waiting = fields.get("state"), None
        elif kind == "waiting":
            self.waiting = fields.get("gate")
        elif kind == "continued":
            self.waiting = None
        elif kind == "transition":
            state = fields.get("state")
            if state is not None and state == self.step_state:
                kind_label = step_kind(self.table, state) or "none"
                self.worker.metrics.gate_wait.labels(kind=kind_label).observe(max(0.0, now - self.step_t0))
            self.step_state = None
            self.waiting = None
            self.worker.count_effects_soon(self.run_id)
        if kind == "note" and str(fields.get("text", "")).startswith("journal: "):
            # where the journal (its URL) and the run log live is the server's own business
            fields = {**fields, "text": "the journal and the run's log are kept on the server"}
        # JSON-safe and scrubbed again (the executor already hands over redacted text only)
        fields = self.worker.redactor.scrub_obj(json.loads(json.dumps(fields, default=str)))
        self.seq += 1
        self.events.append({"seq": self.seq, "event": kind, "at": time.time(), **fields})


def step_durations(started: datetime | None, steps: Iterable[tuple[str, datetime | None]]) -> dict[str, float]:
    """Seconds spent in each state (a state visited twice: the sum), from (state left, when) pairs."""
    out: dict[str, float] = {}
    prev = started
    for state, at in steps:
        if prev is not None and at is not None:
            out[state] = out.get(state, 0.0) + max(0.0, (at - prev).total_seconds())
        prev = at
    return out


def step_kind(table: Table, state: str) -> str | None:
    node = table.nodes.get(state)
    return node.step.kind if node is not None and node.step is not None else None


def pinned_sha(run: RunRecord) -> str | None:
    """The sha256 of the runbook the run recorded (its identity), None if it recorded none."""
    identity = run.context.get(RUNBOOK_IDENTITY)
    return identity.get("sha256") if isinstance(identity, dict) else None


def _recorded(run: RunRecord) -> tuple[Runbook, str | None]:
    """(runbook, sha256) a resume runs with: the text the run recorded when it has one (the file
    on disk is not read), else the shipped file of that name, refused if it changed since."""
    text, pinned = run.context.get(RUNBOOK_TEXT), pinned_sha(run)
    if isinstance(text, str) and pinned:
        return load_recorded_runbook(run.runbook, run.context.get(RUNBOOK_IDENTITY), text), pinned
    return load_runbook_checked(run.runbook, pinned)


#: Earlier runs the expected remaining time is taken from (DONE runs of the same runbook and kind).
HISTORY_RUNS = 5
HISTORY_SCAN = 200
HISTORY_MAX_AGE_S = 30.0


class Worker:
    """Runs submissions as asyncio tasks; owns the Session (journal) they share. Call its reads in a thread."""

    def __init__(self, settings: Settings, factory: SessionFactory, redactor: ServerRedactor, log: Any) -> None:
        self.settings = settings
        self._factory = factory
        self._session: Session | None = None
        self._session_lock = threading.Lock()
        self.redactor = redactor
        self.log = log
        self.runs: collections.OrderedDict[str, ActiveRun] = collections.OrderedDict()
        self._seen_effects: dict[str, set[int]] = {}
        self._effects_lock = threading.Lock()
        self._submit_lock = asyncio.Lock()
        self._background: set[asyncio.Task[Any]] = set()
        self.metrics = Metrics(self.active_count, self.run_counts, max_age=METRICS_MAX_AGE_S,
                               on_error=lambda exc: self.log.warning("metrics_journal_unreadable",
                                                                     error=f"{type(exc).__name__}"))
        self._closed = False
        self._history: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
        self._finished_durations: dict[str, dict[str, float]] = {}

    @property
    def session(self) -> Session:
        if self._closed:
            raise ApiError(503, "the server is shutting down", ExitCode.UNEXPECTED)
        if self._session is None:
            with self._session_lock:
                if self._session is None:
                    session = self._factory(self.settings)
                    # the server's answers hide what the runs' redactors learn, the runs' logs the server's secrets
                    self.redactor.add(*session.settings.tokens())
                    self.redactor.attach(session.redactor)
                    session.redactor.add(*self.redactor.own_secrets)
                    if session.notifier is None and session.settings.notify_url.get_secret_value():
                        # one notifier for the server's lifetime: its runs never wait for a webhook
                        session.notifier = notifier_for(session)
                    self._session = session
        return self._session

    def active_count(self) -> int:
        return sum(1 for r in list(self.runs.values()) if r.active)

    async def submit(self, body: RolloutBody | RollbackBody | ResumeBody, by: str | None = None, *,
                     adopting: bool = False) -> ActiveRun:
        """`by`: who submitted it (the token's name), journaled in the run's audit list.
        `adopting`: this server resumes an orphan on its own, no human asked: it keeps the run's
        `--soak` but never its `--yes` (an adopted run waits for a human at every approval)."""
        async with self._submit_lock:
            adm, note = await anyio.to_thread.run_sync(self._prepare, body, adopting)
            if by is not None:  # who: journaled before the run takes a step (adoption journals its own)
                await anyio.to_thread.run_sync(self._record_submission, adm.run.run_id, body, by)
            return self._launch(adm, note)

    def _prepare(self, body: RolloutBody | RollbackBody | ResumeBody, adopting: bool = False) -> tuple[Admitted, str | None]:
        """In a worker thread: check, journal the run, take its lease, record the runbook identity.
        Returns the admission and the note the run's first event carries (a lease taken over, the
        options a resume kept)."""
        s = self.session
        # the service's admission, exactly as the CLI's (orchestrator/service/admission.py)
        kept_note = None  # a person's resume that keeps the run's --yes says so
        if isinstance(body, RolloutBody):
            req = RolloutRequest(host=body.host, tag=body.tag, runbook=body.runbook or default_runbook(body.host), yes=body.yes,
                                 soak=body.soak)
            signals.parse_soak(req.soak, "soak")
            check_tag(req.tag)
            s.inventory.host(req.host)
            self._refuse_if_busy(req.host)
            digest = load_runbook_checked(req.runbook)[1]
            # admitted with the runbook's prerequisites checked (no override through the server)
            adm = admit_rollout(s, req, soak_name="soak")
        elif isinstance(body, RollbackBody):
            signals.parse_soak(body.soak, "soak")
            s.inventory.host(body.host)
            self._refuse_if_busy(body.host)
            name = rollback_runbook(s, body.host, body.runbook)  # the CLI's choice, whatever the door
            digest = load_runbook_checked(name)[1]
            adm = admit_rollback(s, RollbackRequest(host=body.host, replica=body.replica, runbook=name, to_tag=body.to_tag,
                                                    to_file=body.to_file, yes=body.yes, soak=body.soak), soak_name="soak")
        else:
            run = self.session.journal.get_run(body.run_id)
            req_r = ResumeRequest(run_id=run.run_id, retry=body.retry, yes=body.yes, soak=body.soak, adopting=adopting)
            # the run's own options, unless given (a bad --soak: 400); an adoption never keeps --yes
            kept_yes, _, _, kept = resume_options(run, req_r, soak_name="soak")
            if kept_yes and not body.yes:
                kept_note = kept
            mine = self.runs.get(run.run_id)
            if mine is not None and mine.active:
                raise Refused(f"run {run.run_id} is already running on this server")
            if body.retry:
                self._refuse_if_busy(run.host)
            elif run.terminal:
                raise UserError(f"run {run.run_id} already ended {run.outcome}: {run.message or ''}".rstrip(": "),
                                code=OUTCOME_EXIT.get(run.outcome or "", ExitCode.UNEXPECTED))
            checked, digest = _recorded(run)
            # as on the CLI, a run superseded by a later run of its host is refused (adoption included)
            adm = admit_resume(s, run, req_r, checked=None if body.retry else checked, soak_name="soak")
        # admission journaled the runbook's text and identity: the run executes that text, nothing to compare
        run = adm.run
        # the host's lease admission took with the run (`execute` runs under it): a busy host was a 409
        admitted = s.admitted[run.run_id]
        if not run.context.get(RUNBOOK_IDENTITY):  # a run journaled without one: pin the file checked above
            s.journal.update_context(admitted.lease, run.run_id,
                                     {**run.context, RUNBOOK_IDENTITY: {"name": run.runbook, "sha256": digest}})
            adm = replace(adm, run=s.journal.get_run(run.run_id))
        taken = admitted.took_over
        took_over = None if taken is None else f"took over the expired lease of run {taken.run_id} ({taken.owner})"
        return adm, "; ".join(x for x in (took_over, kept_note) if x) or None

    def _record_submission(self, run_id: str, body: Any, by: str) -> None:
        resume = isinstance(body, ResumeBody)
        how = ("retry " if body.retry else "") if resume else f"{body.action} "
        try:
            self.session.journal.record_audit(run_id, "resumed" if resume else "submitted", by,
                                              f"{how}via the server {describe_owner(owner_id())}")
        except Exception as exc:  # noqa: BLE001 - the run is prepared and leased: it starts whatever happens here
            self.log.warning("audit_not_recorded", run_id=run_id, error=self.redactor.scrub(f"{type(exc).__name__}: {exc}"))

    def _refuse_if_busy(self, host: str) -> None:
        """Before journaling a new run: is the host visibly leased (here or by anyone)?"""
        for r in list(self.runs.values()):
            if r.host == host and r.active:
                raise Refused(f"{host} is being rolled by run {r.run_id} on this server: one rollout per host at a time")
        refuse_if_leased(self.session, host)

    def _launch(self, adm: Admitted, note: str | None) -> ActiveRun:
        run = adm.run
        active = ActiveRun(run.run_id, run.host, worker=self, table=adm.table)
        if note:
            active.event("note", text=note)
        self._remember(active)
        active.task = asyncio.create_task(self._run(active, adm), name=f"run {run.run_id}")
        self.log.info("run_submitted", run_id=run.run_id, host=run.host, kind=run.kind, tag=run.tag)
        return active

    async def _run(self, active: ActiveRun, adm: Admitted) -> None:
        run = adm.run
        active.status = "running"
        audit.RECORDED_BY_SERVER.set(True)  # this task's context only: the server journaled who
        try:
            final = await execute(self.session, run, adm.rb, adm.table, progress=active, yes=adm.yes, soak=adm.soak)
            active.status, active.outcome = "finished", final.outcome
            self.log.info("run_finished", run_id=run.run_id, outcome=final.outcome)
        except asyncio.CancelledError:
            active.status = "cancelled"
            active.error = (f"the server stopped while running it; its lease expires within "
                            f"{int(self.settings.lease_ttl)} s, then `orchestrate resume {run.run_id}` continues it")
            self.log.warning("run_cancelled", run_id=run.run_id)
            raise
        except RunnerFenced as exc:
            active.status, active.error = "fenced", self.redactor.scrub(f"this server lost the lease and stopped: {exc}")
            self.log.warning("run_fenced", run_id=run.run_id, error=str(exc))
        except UserError as exc:  # Refused: execute could not take the lease (another runner won it)
            active.status, active.error = "refused", self.redactor.scrub(str(exc))
            self.log.warning("run_refused", run_id=run.run_id, error=str(exc))
        except Exception as exc:  # noqa: BLE001 - one failing run must not take the server down
            active.status = "failed"
            active.error = self.redactor.scrub(
                f"{type(exc).__name__}: {exc}; the run is left as it is: `orchestrate resume {run.run_id}`"
            )
            self.log.error("run_failed", run_id=run.run_id, exc_info=exc)
        finally:
            active.waiting = None
            self.metrics.snapshot.invalidate()
            if not self._closed:
                with contextlib.suppress(Exception):
                    await anyio.to_thread.run_sync(self.count_effects, run.run_id)

    def _remember(self, active: ActiveRun) -> None:
        self.runs[active.run_id] = active
        self.runs.move_to_end(active.run_id)
        finished = [k for k, r in self.runs.items() if not r.active]
        for k in finished[: max(0, len(finished) - KEEP_FINISHED)]:
            del self.runs[k]
            with self._effects_lock:
                self._seen_effects.pop(k, None)

    def count_effects_soon(self, run_id: str) -> None:
        """From a progress hook (on the loop): count the run's new effects in a thread."""
        task = asyncio.get_running_loop().create_task(anyio.to_thread.run_sync(self.count_effects, run_id))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def count_effects(self, run_id: str) -> None:
        """Count each effect of the run once, when its outcome is journaled (never raises: metrics only)."""
        with contextlib.suppress(Exception):
            effects = self.session.journal.effects(run_id)  # read outside the lock the event loop takes too
            with self._effects_lock:
                seen = self._seen_effects.setdefault(run_id, set())
                for eff in effects:
                    if eff.outcome is not None and eff.effect_id not in seen:
                        seen.add(eff.effect_id)
                        status = str(eff.outcome.get("status") or "recorded")
                        self.metrics.effects.labels(kind=eff.kind, outcome=status).inc()

    async def shutdown(self) -> None:
        """Cancel running tasks (their leases expire; any server or CLI can resume), close the journal."""
        tasks = [r.task for r in self.runs.values() if r.task is not None and not r.task.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
        self._closed = True
        if self._session is not None and self._session.notifier is not None:
            with contextlib.suppress(Exception):
                await self._session.notifier.aclose(FLUSH_S)
        with self._session_lock:
            if self._session is not None:
                self._session.close()
                self._session = None

    async def adopt_loop(self, interval: float) -> None:
        """Until shutdown: adopt orphaned runs every `interval` seconds (errors logged, never fatal)."""
        while not self._closed:
            await asyncio.sleep(interval)
            if self._closed:
                return
            try:
                await self.adopt_once()
            except Exception as exc:  # noqa: BLE001 - the loop must outlive a journal hiccup
                self.log.warning("adoption_failed", error=self.redactor.scrub(f"{type(exc).__name__}: {exc}"))

    async def adopt_once(self) -> None:
        """Resume here every orphaned run whose lease this server wins."""
        for run_id in await anyio.to_thread.run_sync(self.orphans):
            try:
                active = await self.submit(ResumeBody(action="resume", run_id=run_id), adopting=True)
            except (Refused, UserError, ApiError, LeaseHeld, RunNotFound) as exc:  # another runner won it, or it ended
                self.log.info("adoption_skipped", run_id=run_id, reason=self.redactor.scrub(str(exc))[:200])
                continue
            active.adopted = True
            with contextlib.suppress(Exception):  # who: this server, for the run's audit list
                await anyio.to_thread.run_sync(self.session.journal.record_audit, run_id, "adopted",
                                               f"server {describe_owner(owner_id())}",
                                               "its lease expired with no runner renewing it")
            self.log.warning("run_adopted", run_id=run_id, host=active.host,
                             detail="its lease expired with no runner renewing it: resumed here from the journal")

    def orphans(self) -> list[str]:
        """Unfinished runs with journaled transitions whose host has no live lease (in a thread)."""
        journal = self.session.journal
        out: list[str] = []
        for run_id, host in journal.run_census()[1]:
            mine = self.runs.get(run_id)
            if mine is not None and (mine.active or mine.status in ("failed", "fenced")):
                continue
            if journal.current_lease(host) is None and journal.transitions(run_id):
                out.append(run_id)
        return out

    def run_counts(self) -> dict[str, int]:
        journal = self.session.journal
        done, unfinished = journal.run_census()
        counts = collections.Counter(done)
        leases: dict[str, Any] = {}
        for run_id, host in unfinished:
            if host not in leases:
                leases[host] = journal.current_lease(host)
            lease = leases[host]
            counts["RUNNING" if lease is not None and lease.run_id == run_id else "INTERRUPTED"] += 1
        return dict(counts)

    def healthy(self) -> bool:
        try:
            self.session.journal.list_runs(limit=1)
        except Exception as exc:  # noqa: BLE001 - health answers, it does not raise
            self.log.warning("health_check_failed", error=self.redactor.scrub(f"{type(exc).__name__}: {exc}"))
            return False
        return True

    def list_runs(self, host: str | None, limit: int) -> list[dict[str, Any]]:
        journal = self.session.journal
        runs = journal.list_runs(host=host, limit=limit)
        submitters = journal.submitters([r.run_id for r in runs])
        return [{**context_summary(r), "target_tag": target_tag(r), "terminal": r.terminal,
                 "submitted_by": (sub.by if (sub := submitters.get(r.run_id)) is not None else None),
                 "submitted_at": sub.at.isoformat() if sub is not None else None,
                 # .get: the event loop may forget a run between a check and a read (this runs in a thread)
                 "worker_status": active.status if (active := self.runs.get(r.run_id)) is not None else None} for r in runs]

    def run_detail(self, run_id: str, *, events_after: int = 0) -> dict[str, Any]:
        journal = self.session.journal
        run = self.session.journal.get_run(run_id)
        lease = journal.current_lease(run.host)
        mine = self.runs.get(run_id)
        items = journal.audit(run_id)
        paused = journal.paused(run_id)
        return {
            **context_summary(run),
            "terminal": run.terminal,
            "failure": run.context.get("failure"),
            # name and digest only: the recorded path is the server's own file system
            RUNBOOK_IDENTITY: ({k: v for k, v in ident.items() if k in ("name", "sha256")}
                           if isinstance(ident := run.context.get(RUNBOOK_IDENTITY), dict) else ident),
            "abort_requested": journal.abort_requested(run_id),
            "audit": [e.to_json() for e in items],
            "who": audit.summary(items),
            "paused": paused.to_json() if paused is not None else None,
            "approvals": sorted(journal.approvals(run_id)),
            "lease": None if lease is None or lease.run_id != run_id else {
                "owner": lease.owner, "token": lease.token, "expires_at": lease.expires_at.isoformat()},
            "transitions": [
                {"seq": t.seq, "from": t.from_state, "event": t.event, "to": t.to_state, "at": t.at.isoformat(),
                 "note": t.note}
                for t in journal.transitions(run_id)
            ],
            "effects": [
                {"effect_id": e.effect_id, "step": e.step, "kind": e.kind, "mutating": e.mutating,
                 "request": e.request, "intent_at": e.intent_at.isoformat(), "outcome": e.outcome,
                 "outcome_at": e.outcome_at.isoformat() if e.outcome_at else None}
                for e in journal.effects(run_id)
            ],
            "worker": mine.view(events_after) if mine is not None else None,
        }

    def history(self, run: RunRecord) -> dict[str, Any]:
        """Median seconds per state over the last `HISTORY_RUNS` DONE runs of the same runbook and
        kind (the run page's expected remaining time): `{"runs": n, "median": {state: s}}`."""
        key = (run.runbook, run.kind)
        hit = self._history.get(key)
        if hit is not None and time.monotonic() - hit[0] < HISTORY_MAX_AGE_S:
            return hit[1]
        journal = self.session.journal
        samples: dict[str, list[float]] = {}
        n = 0
        for r in journal.list_runs(limit=HISTORY_SCAN):
            if n >= HISTORY_RUNS:
                break
            if r.run_id == run.run_id or r.runbook != run.runbook or r.kind != run.kind or r.outcome != "DONE":
                continue
            durations = self._finished_durations.get(r.run_id)
            if durations is None:
                durations = step_durations(r.created_at, ((t.from_state, t.at) for t in journal.transitions(r.run_id)))
                self._finished_durations[r.run_id] = durations
            n += 1
            for state, seconds in durations.items():
                samples.setdefault(state, []).append(seconds)
        value = {"runs": n, "median": {k: statistics.median(v) for k, v in samples.items()}}
        self._history[key] = (time.monotonic(), value)
        return value

    def approve(self, run_id: str, gate: str | None, by: str, now: bool = False, *, at_gate: bool = False) -> dict[str, Any]:
        """`at_gate` (the run page, any browser): approve only the gate the run waits at now, by
        name; `*` and a gate not reached yet are refused (a wildcard once let a click during
        r2's cold start pass r2.soak without stopping)."""
        run = self.session.journal.get_run(run_id)
        # the approval gates of the run's (pinned) runbook; only `*` if it cannot be loaded here
        gates = None if run.terminal else signals.run_gates(
            run, lambda: load_runbook_checked(run.runbook, pinned_sha(run))[0])
        if gate is None and not run.terminal:  # no gate named: the one it waits at now (approval_scope.py)
            from orchestrator.engine.rules.approval_scope import waiting_gate

            gate = waiting_gate(run, gates)
        if at_gate and not run.terminal:
            named = sorted(g for g in (gates or ()) if g != "*")
            if gate == "*":
                raise ApiError(400, "approve names the gate the run waits at (one of "
                                    f"{', '.join(named) or 'its approval gates'}), not *", ExitCode.BAD_INPUT)
            if run.state != gate:
                raise Refused(f"run {run.run_id} is at {run.state}, not waiting at {gate[:60]}: nothing was approved")
        signals.approve(self.session.journal, run, gate, by, gates=gates, now=now)
        self.log.info("approved", run_id=run.run_id, gate=gate, by=by)
        return {"run_id": run.run_id, "gate": gate, "approved_by": by}

    def signal(self, action: str, run_id: str, by: str) -> dict[str, Any]:
        """POST /runs/{id}/pause, /continue or /abort (`action`), asked by `by`: the service's signal."""
        run = self.session.journal.get_run(run_id)
        if action == "abort":
            return self._abort(run, by)
        send, key = (signals.pause, "paused_by") if action == "pause" else (signals.continue_run, "continued_by")
        message = send(self.session.journal, run, by)
        self.log.info(f"{action}_requested", run_id=run.run_id, by=by)
        return {"run_id": run.run_id, key: by, "message": message}

    def _abort(self, run: RunRecord, by: str) -> dict[str, Any]:
        result = signals.abort(self.session.journal, run, by)
        self.log.info("abort_requested", run_id=run.run_id, by=by)
        mine = self.runs.get(run.run_id)
        if result.runner is None and not (mine is not None and mine.active):
            # nobody drives it: read the host and end it with what is true (orchestrator/service/orphans.py)
            from orchestrator.service.orphans import end_unowned

            ended = asyncio.run(end_unowned(self.session, self.session.journal.get_run(run.run_id), by))
            if ended is not None:
                self.log.warning("orphan_ended", run_id=run.run_id, by=by)
                return {"run_id": run.run_id, "abort_requested": True, "runner": None, "message": ended, "ended": True}
        return {"run_id": run.run_id, "abort_requested": True, "runner": result.runner, "message": result.message}
