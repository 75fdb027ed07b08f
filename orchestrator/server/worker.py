"""The worker of `orchestrate serve`: runs submissions as asyncio tasks in this process.

Each run goes through `runner.execute`, exactly as the CLI's: same journal, same host lease, same
executor. Rules:

- Every journal call the server itself makes runs in a worker thread (`anyio.to_thread`), never
  on the event loop, so a slow journal cannot stall other requests. The journal objects allow
  this: SQLite is opened with `check_same_thread=False` and every backend serialises its one
  connection with a lock (journal/base.py). (The executor's own journal writes happen inside
  `execute`, which this package does not change.)
- Submissions are prepared one at a time (an asyncio lock): the in-memory "already running here"
  check and the lease claim cannot interleave.
- A submission takes the host's lease before it is answered, so a busy host is a 409 to the
  submitter, not a run that fails later.
- The runbook is named, never a path, and comes from the packaged runbook directory; its
  identity (name, sha256) is recorded in the run's context (`runbook_identity`) and a resume
  loads exactly that content or is refused.
- A run that raises is logged and left, unfinished, for `orchestrate resume`; on shutdown running
  tasks are cancelled and their leases left to expire.
- **Adoption** (`adopt_loop`): every `adopt_interval` seconds the worker looks for unfinished runs
  whose host lease has expired (their runner, a server or a laptop, is gone: a live runner renews
  every third of the TTL) and resumes them here, exactly as `POST /runs {"action":"resume"}` does.
  The lease is what makes one server own a run: two servers that see the same orphan both try to
  take its lease, one wins (fencing token + 1) and the other is refused and moves on. Resume
  settles every journaled effect before it acts, so no mutating call is sent twice. Not adopted:
  a run with no journaled transition (never started, e.g. refused at submission), and a run that
  failed or was fenced on this server (no retry loop on a bug; `orchestrate resume` is for humans).
  An adopted run resumes without `--yes`: its approval gates wait for a human.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
from typing import Any, Callable

from orchestrator.journal import audit
from orchestrator.server.adoption import AdoptionMixin
from orchestrator.server.config import ServerRedactor
from orchestrator.server.errors import ApiError
from orchestrator.server.metrics import Metrics
from orchestrator.server.run_actions import RunActionsMixin
from orchestrator.server.run_reads import HISTORY_MAX_AGE_S, HISTORY_RUNS, HISTORY_SCAN, RunReadsMixin  # noqa: F401
from orchestrator.server.run_state import KEEP_EVENTS, KEEP_TAIL, ActiveRun, ServerProgress, step_durations  # noqa: F401
from orchestrator.server.schemas import ResumeBody, RollbackBody, RolloutBody
from orchestrator.server.submission import IDENTITY_KEY, SubmissionMixin, _in_thread, _Prepared  # noqa: F401
from orchestrator.service.notify import FLUSH_S
# `execute` is looked up here when a run starts (`Worker._run`): the tests replace it on this module
from orchestrator.engine.executor import RunnerFenced
from orchestrator.service.runner import execute
from orchestrator.service.session import Session, notifier_for
from orchestrator.util.exit_codes import ExitCode
from orchestrator.util.settings import Settings
from orchestrator.util.user_errors import UserError

SessionFactory = Callable[[Settings], Session]

#: How many finished runs the worker remembers (status, error) for GET /runs/{id}.
KEEP_FINISHED = 200


class Worker(SubmissionMixin, AdoptionMixin, RunReadsMixin, RunActionsMixin):
    """Runs submissions as asyncio tasks; owns the Session (journal) they share.

    Its parts: submissions (server/submission.py), adoption (server/adoption.py), reads
    (server/run_reads.py), a person's signals (server/run_actions.py); here the session, the runs'
    tasks, effects counting and the lifecycle."""

    def __init__(self, settings: Settings, factory: SessionFactory, redactor: ServerRedactor, log: Any, *,
                 metrics_max_age: float = 10.0) -> None:
        self.settings = settings
        self._factory = factory
        self._session: Session | None = None
        self._session_lock = threading.Lock()
        self.redactor = redactor
        self.log = log
        self.runs: collections.OrderedDict[str, ActiveRun] = collections.OrderedDict()
        self._seen_effects: dict[str, set[int]] = {}
        self._effects_lock = threading.Lock()
        self._submit_lock: asyncio.Lock | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self.metrics = Metrics(self.active_count, self.run_counts, max_age=metrics_max_age,
                               on_error=lambda exc: self.log.warning("metrics_journal_unreadable",
                                                                     error=f"{type(exc).__name__}"))
        self._closed = False
        self._history: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
        self._finished_durations: dict[str, dict[str, float]] = {}

    # -- session

    @property
    def session(self) -> Session:
        if self._closed:
            raise ApiError(503, "the server is shutting down", ExitCode.UNEXPECTED)
        if self._session is None:
            with self._session_lock:
                if self._session is None:
                    session = self._factory(self.settings)
                    # The server's answers hide what the runs' redactor learns (env-map values),
                    # and the runs' logs hide the server's own secrets.
                    self.redactor.add(*session.settings.tokens())
                    self.redactor.attach(session.redactor)
                    session.redactor.add(*self.redactor.own_secrets)
                    if session.notifier is None and session.settings.notify_url.get_secret_value():
                        # one notifier for the server's lifetime: its runs never wait for a webhook
                        session.notifier = notifier_for(session)
                    self._session = session
        return self._session

    def clock_now(self) -> float:
        return self.session.clock.monotonic()

    def active_count(self) -> int:
        return sum(1 for r in list(self.runs.values()) if r.active)

    # -- submissions

    async def submit(self, body: RolloutBody | RollbackBody | ResumeBody, by: str | None = None, *,
                     adopting: bool = False) -> ActiveRun:
        """`by`: who submitted it (the token's name), shown on the run's page by this server.
        `adopting`: this server resumes an orphan on its own, no human asked: it keeps the run's
        `--soak` but never its `--yes` (issue 21: an adopted run waits for a human at every approval)."""
        if self._submit_lock is None:
            self._submit_lock = asyncio.Lock()
        async with self._submit_lock:
            prepared = await _in_thread(self._prepare, body, by, adopting)
            if by is not None:  # who: journaled before the run takes a step (adoption journals its own)
                await _in_thread(self._audit_submission, prepared.run.run_id, body, by)
            active = self._launch(prepared)
            active.by = by
            return active

    def _launch(self, p: _Prepared) -> ActiveRun:
        active = ActiveRun(p.run.run_id, p.run.host)
        progress = ServerProgress(self, active, p.table)
        if p.took_over:
            progress.event("note", text=p.took_over)
        self._remember(active)
        active.task = asyncio.create_task(self._run(active, progress, p), name=f"run {p.run.run_id}")
        self.log.info("run_submitted", run_id=p.run.run_id, host=p.run.host, kind=p.run.kind, tag=p.run.tag)
        return active

    async def _run(self, active: ActiveRun, progress: ServerProgress, p: _Prepared) -> None:
        run = p.run
        active.status = "running"
        audit.RECORDED_BY_SERVER.set(True)  # this task's context only: the server journaled who
        try:
            final = await execute(self.session, run, p.rb, p.table, progress=progress, yes=p.yes, soak=p.soak)
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
                    await _in_thread(self.count_effects, run.run_id)

    def _remember(self, active: ActiveRun) -> None:
        self.runs[active.run_id] = active
        self.runs.move_to_end(active.run_id)
        finished = [k for k, r in self.runs.items() if not r.active]
        for k in finished[: max(0, len(finished) - KEEP_FINISHED)]:
            del self.runs[k]
            with self._effects_lock:
                self._seen_effects.pop(k, None)

    # -- effects counting (off the event loop)

    def count_effects_soon(self, run_id: str) -> None:
        """From a progress hook (on the loop): count the run's new effects in a thread."""
        task = asyncio.get_running_loop().create_task(_in_thread(self._count_quietly, run_id))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _count_quietly(self, run_id: str) -> None:
        with contextlib.suppress(Exception):
            self.count_effects(run_id)

    def count_effects(self, run_id: str) -> None:
        """Count each effect of the run once, when its outcome is journaled."""
        effects = self.session.journal.effects(run_id)
        with self._effects_lock:
            seen = self._seen_effects.setdefault(run_id, set())
            for eff in effects:
                if eff.outcome is not None and eff.effect_id not in seen:
                    seen.add(eff.effect_id)
                    status = str(eff.outcome.get("status") or "recorded")
                    self.metrics.effects.labels(kind=eff.kind, outcome=status).inc()

    # -- lifecycle

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
