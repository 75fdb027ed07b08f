"""`orchestrate serve`: rollouts that outlive the laptop that asked for them (team mode).

A small ASGI service (starlette, served by uvicorn). It accepts rollout, rollback and resume
requests and runs each as an asyncio task in this process, through `runner.execute`, exactly
as the CLI would: same journal, same host lease, same executor. Several servers and CLIs may
share one PostgreSQL journal; the host lease (with its fencing token) is what keeps two of them
from rolling one host at once.

Routes (JSON; every route but /healthz and /metrics needs `Authorization: Bearer <token>`):

    GET  /healthz                 {"status": "ok", "journal": "sqlite|postgresql", "active_runs": N}
    GET  /metrics                 Prometheus text (this app's own registry)
    POST /runs                    {"action": "rollout"|"rollback"|"resume", ...} -> 202 {"run_id": ...}
    GET  /runs[?host=&limit=]     {"runs": [summary, ...]}, newest first
    GET  /runs/{id}[?events_after=N]  summary + transitions + effects (+ lease, + this server's view)
    POST /runs/{id}/approve       {"gate": "*", "by": "alice@laptop"}
    POST /runs/{id}/abort         {"by": "alice@laptop"}

Errors are `{"error": "<one line>", "exit_code": N}`: 400 bad input (exit 2), 401 no or wrong
token, 404 unknown run, 409 refused, e.g. the host is leased (exit 5), 502 a host system failed
while the request was being prepared, 500 anything else.

A submission takes the host's lease before it answers 202, so "the host is busy" is a 409 to the
submitter, not a run that fails later. A run that raises is logged and left, unfinished, for
`orchestrate resume`; on shutdown running tasks are cancelled and their leases left to expire
(then any server or CLI can resume them).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import hmac
import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union
from urllib.parse import urlsplit

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from pydantic import BaseModel, ConfigDict, Field, SecretStr, TypeAdapter, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from orchestrator.clients.errors import ClientError
from orchestrator.durations import parse_duration
from orchestrator.exit_codes import OUTCOME_EXIT, ExitCode
from orchestrator.journal.base import JournalError, LeaseHeld, RunNotFound, RunRecord
from orchestrator.machine import Table
from orchestrator.redaction import Redactor
from orchestrator.runbook import DEFAULT_RUNBOOK, Runbook, load_runbook
from orchestrator.runner import (
    RunnerFenced,
    Session,
    check_tag,
    context_summary,
    execute,
    new_rollback,
    new_rollout,
    owner_id,
    retry_run,
    table_for,
)
from orchestrator.settings import Settings
from orchestrator.user_errors import Refused, UserError

SessionFactory = Callable[[Settings], Session]

#: How many finished runs the worker remembers (status, error) for GET /runs/{id}.
KEEP_FINISHED = 200
#: How many progress events per run the worker keeps for followers.
KEEP_EVENTS = 200
#: Bucket bounds of the gate-wait histogram, in seconds: from a quick check to a 2-hour soak.
GATE_WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 5400, 7200, 10800)
#: `orchestrator_runs` label values: unfinished runs split by whether a live lease holds them.
RUN_STATES = ("RUNNING", "INTERRUPTED", "DONE", "ROLLED_BACK", "HALTED", "ABORTED")


class ServerConfig(BaseSettings):
    """`ORCHESTRATOR_SERVER_TOKEN`: the bearer token of `orchestrate serve` (and of `--server` clients)."""

    model_config = SettingsConfigDict(
        env_prefix="ORCHESTRATOR_SERVER_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    token: SecretStr = SecretStr("")


def journal_kind(settings: Settings) -> str:
    url = settings.database_url
    return "postgresql" if url.startswith(("postgresql://", "postgres://")) else "sqlite"


class _Stderr:
    """structlog's output: whatever sys.stderr is at the time of the write."""

    def msg(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    def __getattr__(self, name: str) -> Any:
        return self.msg


def server_logger(redactor: Redactor) -> Any:
    """JSON lines on stderr, scrubbed. Bound to its own processors: `runner.execute` reconfigures
    structlog's global configuration to write each run's log file, and must not capture these."""
    return structlog.wrap_logger(
        _Stderr(),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            redactor.structlog_processor(),
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(20),
        cache_logger_on_first_use=False,
    ).bind(logger="orchestrator.server")


# --------------------------------------------------------------------------- request bodies


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RolloutBody(_Body):
    action: Literal["rollout"]
    host: str = Field(min_length=1)
    tag: str = Field(min_length=1)
    runbook: str | None = None
    yes: bool = False
    #: Override of every soak: a duration ("30m", "0") or seconds.
    soak: str | float | None = None


class RollbackBody(_Body):
    action: Literal["rollback"]
    host: str = Field(min_length=1)
    replica: Literal["r1", "r2", "all"] = "all"
    to_tag: str | None = None
    to_file: str | None = None
    runbook: str | None = None


class ResumeBody(_Body):
    action: Literal["resume"]
    run_id: str = Field(min_length=1)
    retry: bool = False
    yes: bool = False
    soak: str | float | None = None


class ApproveBody(_Body):
    gate: str = Field(default="*", min_length=1)
    by: str | None = None


class AbortBody(_Body):
    by: str | None = None


SubmitBody = Annotated[Union[RolloutBody, RollbackBody, ResumeBody], Field(discriminator="action")]
_SUBMIT = TypeAdapter(SubmitBody)


def _validation_message(exc: ValidationError) -> str:
    """One line: the first problem, named by its field."""
    first = exc.errors()[0]
    loc = [p for p in first["loc"] if not isinstance(p, int)]
    if loc and loc[0] in ("rollout", "rollback", "resume"):
        loc = loc[1:]  # the discriminator's branch, not a field
    where = ".".join(str(p) for p in loc)
    msg = first["msg"]
    if first["type"] == "union_tag_invalid":
        return "action must be one of rollout, rollback, resume"
    if first["type"] == "union_tag_not_found":
        return "the body needs an action: rollout, rollback or resume"
    if first["type"] == "extra_forbidden":
        return f"unknown field {where!r}"
    return f"{where}: {msg}" if where else f"the request body: {msg}"


def _soak_seconds(soak: str | float | None) -> float | None:
    if soak is None:
        return None
    try:
        return parse_duration(soak)
    except ValueError as exc:
        raise UserError(f"soak: {exc}") from None


# --------------------------------------------------------------------------- errors as answers


class ApiError(Exception):
    def __init__(self, status: int, message: str, code: int) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


def _error(status: int, message: str, code: int | ExitCode, **extra: Any) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": message, "exit_code": int(code), **extra}, status_code=status, headers=headers)


# --------------------------------------------------------------------------- metrics


class Metrics:
    """This app's Prometheus registry: process-local counters plus journal-backed gauges."""

    def __init__(self, worker: "Worker") -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.gate_wait = Histogram(
            "orchestrator_gate_wait_seconds",
            "Time a run spent in one state (its step and gate) before its transition, by step kind.",
            ["kind"], buckets=GATE_WAIT_BUCKETS, registry=self.registry,
        )
        self.effects = Counter(
            "orchestrator_effects",  # exposed as orchestrator_effects_total
            "Journaled effects (calls to compose-manager) of runs this server executed, by kind and outcome status.",
            ["kind", "outcome"], registry=self.registry,
        )
        self.active = Gauge("orchestrator_server_active_runs", "Runs executing in this server now.",
                            registry=self.registry)
        self.active.set_function(lambda: worker.active_count())
        self.registry.register(_JournalRuns(worker))


class _JournalRuns:
    """`orchestrator_runs{state}` read from the journal at scrape time (every server agrees)."""

    def __init__(self, worker: "Worker") -> None:
        self.worker = worker

    def describe(self) -> list[Any]:
        return [GaugeMetricFamily("orchestrator_runs", "Runs in the journal by state.", labels=["state"]),
                GaugeMetricFamily("orchestrator_journal_up", "1 if the last scrape could read the journal.")]

    def collect(self) -> Any:
        runs = GaugeMetricFamily(
            "orchestrator_runs",
            "Runs in the journal by state: RUNNING (a live lease holds it), INTERRUPTED (unfinished, no live "
            "lease: `orchestrate resume` it) or its outcome.",
            labels=["state"],
        )
        up = 1.0
        try:
            counts = self.worker.run_counts()
        except Exception as exc:  # noqa: BLE001 - a scrape must answer even with the journal down
            self.worker.log.warning("metrics_journal_unreadable", error=f"{type(exc).__name__}: {exc}")
            counts, up = {}, 0.0
        if up:
            for state in RUN_STATES:
                runs.add_metric([state], counts.get(state, 0))
            yield runs
        yield GaugeMetricFamily("orchestrator_journal_up", "1 if the last scrape could read the journal.", value=up)


# --------------------------------------------------------------------------- the worker


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
    seq: int = 0
    events: collections.deque[dict[str, Any]] = field(default_factory=lambda: collections.deque(maxlen=KEEP_EVENTS))

    @property
    def active(self) -> bool:
        return self.status in ("starting", "running")

    def add_event(self, kind: str, fields: dict[str, Any]) -> None:
        self.seq += 1
        self.events.append({"seq": self.seq, "event": kind, "at": time.time(), **fields})

    def view(self, events_after: int = 0) -> dict[str, Any]:
        return {"status": self.status, "error": self.error, "outcome": self.outcome, "step": self.step,
                "waiting": self.waiting, "events": [e for e in self.events if e["seq"] > events_after]}


class ServerProgress:
    """The executor's progress hooks, turned into the worker's run view and into metrics."""

    def __init__(self, worker: "Worker", active: ActiveRun, table: Table) -> None:
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
        if kind == "step_started":
            self.step_state, self.step_t0 = fields.get("state"), now
            self.active.step, self.active.waiting = fields.get("state"), None
        elif kind == "waiting":
            self.active.waiting = fields.get("gate")
        elif kind == "transition":
            state = fields.get("state")
            if state is not None and state == self.step_state:
                node = self.table.nodes.get(state)
                step_kind = node.step.kind if node is not None and node.step is not None else "none"
                self.worker.metrics.gate_wait.labels(kind=step_kind).observe(max(0.0, now - self.step_t0))
            self.step_state = None
            self.active.waiting = None
            self.worker.count_effects(self.active.run_id)
        # JSON-safe and scrubbed again (the executor already hands over redacted text only)
        self.active.add_event(kind, self.worker.redactor.scrub_obj(json.loads(json.dumps(fields, default=str))))


class Worker:
    """Runs submissions as asyncio tasks in this process; owns the Session (journal) they share."""

    def __init__(self, settings: Settings, factory: SessionFactory, redactor: Redactor, log: Any) -> None:
        self.settings = settings
        self._factory = factory
        self._session: Session | None = None
        self.redactor = redactor
        self.log = log
        self.runs: collections.OrderedDict[str, ActiveRun] = collections.OrderedDict()
        self._seen_effects: dict[str, set[int]] = {}
        self.metrics = Metrics(self)
        self._closed = False

    # -- session

    @property
    def session(self) -> Session:
        if self._closed:
            raise ApiError(503, "the server is shutting down", ExitCode.UNEXPECTED)
        if self._session is None:
            self._session = self._factory(self.settings)
            self.redactor.add(*self._session.settings.tokens())
        return self._session

    def clock_now(self) -> float:
        return self.session.clock.monotonic()

    def active_count(self) -> int:
        return sum(1 for r in self.runs.values() if r.active)

    # -- submissions

    async def submit(self, body: RolloutBody | RollbackBody | ResumeBody) -> ActiveRun:
        s = self.session
        yes, soak = False, None
        if isinstance(body, RolloutBody):
            soak, yes = _soak_seconds(body.soak), body.yes
            check_tag(body.tag)
            s.inventory.host(body.host)
            self._refuse_if_busy(body.host)
            run, rb, table = new_rollout(s, body.host, body.tag, body.runbook or DEFAULT_RUNBOOK)
        elif isinstance(body, RollbackBody):
            s.inventory.host(body.host)
            self._refuse_if_busy(body.host)
            run, rb, table = await new_rollback(s, body.host, body.replica, body.runbook, body.to_tag, body.to_file)
        else:
            soak, yes = _soak_seconds(body.soak), body.yes
            run, rb, table = self._resumable(body)
        took_over = self._claim(run, new=not isinstance(body, ResumeBody) or body.retry)
        return self._launch(run, rb, table, yes=yes, soak=soak, took_over=took_over)

    def _resumable(self, body: ResumeBody) -> tuple[RunRecord, Runbook, Table]:
        s = self.session
        run = self.get_run(body.run_id)
        mine = self.runs.get(run.run_id)
        if mine is not None and mine.active:
            raise Refused(f"run {run.run_id} is already running on this server")
        if body.retry:
            self._refuse_if_busy(run.host)
            return retry_run(s, run)
        if run.terminal:
            raise UserError(f"run {run.run_id} already ended {run.outcome}: {run.message or ''}".rstrip(": "),
                            code=OUTCOME_EXIT.get(run.outcome or "", ExitCode.UNEXPECTED))
        rb = load_runbook(run.runbook)
        return run, rb, table_for(run, rb)

    def _refuse_if_busy(self, host: str) -> None:
        """Before journaling a new run: is the host visibly leased (here or by anyone)?"""
        for r in self.runs.values():
            if r.host == host and r.active:
                raise Refused(f"{host} is being rolled by run {r.run_id} on this server: one rollout per host at a time")
        lease = self.session.journal.current_lease(host)
        if lease is not None:
            raise Refused(
                f"{host} is leased by run {lease.run_id} ({lease.owner}) until {lease.expires_at:%Y-%m-%d %H:%M:%S} UTC: "
                f"one rollout per host at a time; wait, or abort that run"
            )

    def _claim(self, run: RunRecord, *, new: bool) -> str | None:
        """Take the host's lease for the run now, so a busy host is a 409 to the submitter.

        `execute` acquires it again under the same run id and owner (a renewal with a new token).
        A new run journaled a moment before another runner won the lease is left unstarted.
        """
        try:
            _, taken = self.session.journal.acquire_lease(run.host, run.run_id, owner_id(), self.settings.lease_ttl)
        except LeaseHeld as exc:
            until = f"{exc.expires_at:%Y-%m-%d %H:%M:%S} UTC"
            if exc.holder_run_id == run.run_id:
                raise Refused(
                    f"run {run.run_id} is being run by {exc.owner} (lease until {until}): "
                    f"resume it only once that lease has expired"
                ) from None
            if new:
                self._remember(ActiveRun(run.run_id, run.host, status="refused", error=str(exc)))
            raise Refused(
                f"{run.host} is leased by run {exc.holder_run_id} ({exc.owner}) until {until}: "
                f"one rollout per host at a time; run {run.run_id} was not started"
            ) from None
        if taken is None:
            return None
        return f"took over the expired lease of run {taken.run_id} ({taken.owner})"

    def _launch(self, run: RunRecord, rb: Runbook, table: Table, *, yes: bool, soak: float | None,
                took_over: str | None) -> ActiveRun:
        active = ActiveRun(run.run_id, run.host)
        progress = ServerProgress(self, active, table)
        if took_over:
            progress.event("note", text=took_over)
        self._remember(active)
        active.task = asyncio.create_task(self._run(active, progress, run, rb, table, yes=yes, soak=soak),
                                          name=f"run {run.run_id}")
        self.log.info("run_submitted", run_id=run.run_id, host=run.host, kind=run.kind, tag=run.tag)
        return active

    async def _run(self, active: ActiveRun, progress: ServerProgress, run: RunRecord, rb: Runbook, table: Table,
                   *, yes: bool, soak: float | None) -> None:
        active.status = "running"
        try:
            final = await execute(self.session, run, rb, table, progress=progress, yes=yes, soak=soak)
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
            with contextlib.suppress(Exception):
                self.count_effects(run.run_id)

    def _remember(self, active: ActiveRun) -> None:
        self.runs[active.run_id] = active
        self.runs.move_to_end(active.run_id)
        finished = [k for k, r in self.runs.items() if not r.active]
        for k in finished[: max(0, len(finished) - KEEP_FINISHED)]:
            del self.runs[k]
            self._seen_effects.pop(k, None)

    # -- reads

    def get_run(self, run_id: str) -> RunRecord:
        try:
            return self.session.journal.get_run(run_id)
        except RunNotFound:
            raise ApiError(404, f"no run {run_id!r} in the journal", ExitCode.BAD_INPUT) from None

    def count_effects(self, run_id: str) -> None:
        """Count each effect of the run once, when its outcome is journaled."""
        seen = self._seen_effects.setdefault(run_id, set())
        for eff in self.session.journal.effects(run_id):
            if eff.outcome is not None and eff.effect_id not in seen:
                seen.add(eff.effect_id)
                status = str(eff.outcome.get("status") or "recorded")
                self.metrics.effects.labels(kind=eff.kind, outcome=status).inc()

    def run_counts(self) -> dict[str, int]:
        journal = self.session.journal
        counts: dict[str, int] = collections.Counter()
        leases: dict[str, Any] = {}
        for run in journal.list_runs(limit=1_000_000):
            if run.terminal:
                counts[run.outcome or "HALTED"] += 1
                continue
            if run.host not in leases:
                leases[run.host] = journal.current_lease(run.host)
            lease = leases[run.host]
            counts["RUNNING" if lease is not None and lease.run_id == run.run_id else "INTERRUPTED"] += 1
        return counts

    def run_detail(self, run_id: str, *, events_after: int = 0) -> dict[str, Any]:
        journal = self.session.journal
        run = self.get_run(run_id)
        lease = journal.current_lease(run.host)
        mine = self.runs.get(run_id)
        return {
            **context_summary(run),
            "terminal": run.terminal,
            "failure": run.context.get("failure"),
            "abort_requested": journal.abort_requested(run_id),
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

    # -- lifecycle

    async def shutdown(self) -> None:
        """Cancel running tasks (their leases expire; any server or CLI can resume), close the journal."""
        tasks = [r.task for r in self.runs.values() if r.task is not None and not r.task.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._closed = True
        if self._session is not None:
            self._session.close()
            self._session = None


# --------------------------------------------------------------------------- the app


def _protected(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """Bearer auth first, then the handler, with user-facing errors turned into JSON answers."""

    @functools.wraps(handler)
    async def wrapped(request: Request) -> Response:
        app_state = request.app.state
        if app_state.token is not None:
            given = request.headers.get("authorization", "")
            scheme, _, value = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), app_state.token.encode()):
                return _error(401, "missing or wrong bearer token (ORCHESTRATOR_SERVER_TOKEN)", ExitCode.BAD_INPUT)
        worker: Worker = app_state.worker
        try:
            return await handler(request)
        except ApiError as exc:
            return _error(exc.status, worker.redactor.scrub(exc.message), exc.code)
        except ValidationError as exc:
            return _error(400, worker.redactor.scrub(_validation_message(exc)), ExitCode.BAD_INPUT)
        except Refused as exc:
            return _error(409, worker.redactor.scrub(str(exc)), exc.code)
        except UserError as exc:
            return _error(400, worker.redactor.scrub(str(exc)), exc.code)
        except RunNotFound as exc:
            return _error(404, worker.redactor.scrub(str(exc)), ExitCode.BAD_INPUT)
        except LeaseHeld as exc:
            return _error(409, worker.redactor.scrub(str(exc)), ExitCode.ABORTED)
        except ClientError as exc:
            return _error(502, worker.redactor.scrub(str(exc)), ExitCode.UNEXPECTED)
        except JournalError as exc:
            worker.log.error("journal_error", path=request.url.path, error=str(exc))
            return _error(500, worker.redactor.scrub(f"journal: {exc}"), ExitCode.UNEXPECTED)
        except Exception as exc:  # noqa: BLE001 - an answer, and a log line with the traceback
            worker.log.error("request_failed", path=request.url.path, exc_info=exc)
            return _error(500, worker.redactor.scrub(f"internal error: {type(exc).__name__}: {exc}"), ExitCode.UNEXPECTED)

    return wrapped


async def _json_body(request: Request, *, optional: bool = False) -> Any:
    raw = await request.body()
    if not raw.strip():
        if optional:
            return {}
        raise ApiError(400, "the request needs a JSON body", ExitCode.BAD_INPUT)
    try:
        return json.loads(raw)
    except ValueError:
        raise ApiError(400, "the request body is not JSON", ExitCode.BAD_INPUT) from None


def _by(request: Request, given: str | None) -> str:
    who = (given or "").strip()[:100] or "anonymous"
    client = request.client.host if request.client else "?"
    return f"{who} via {client} on {owner_id()}"


async def healthz(request: Request) -> Response:
    worker: Worker = request.app.state.worker
    body = {"status": "ok", "journal": journal_kind(worker.settings), "active_runs": worker.active_count()}
    try:
        worker.session.journal.list_runs(limit=1)
    except Exception as exc:  # noqa: BLE001 - health answers, it does not raise
        return JSONResponse({**body, "status": "error",
                             "error": worker.redactor.scrub(f"{type(exc).__name__}: {exc}")}, status_code=503)
    return JSONResponse(body)


async def metrics(request: Request) -> Response:
    worker: Worker = request.app.state.worker
    return Response(generate_latest(worker.metrics.registry), media_type=CONTENT_TYPE_LATEST)


@_protected
async def submit_run(request: Request) -> Response:
    worker: Worker = request.app.state.worker
    body = _SUBMIT.validate_python(await _json_body(request))
    active = await worker.submit(body)
    return JSONResponse({"run_id": active.run_id}, status_code=202)


@_protected
async def list_runs(request: Request) -> Response:
    worker: Worker = request.app.state.worker
    host = request.query_params.get("host") or None
    try:
        limit = max(1, min(1000, int(request.query_params.get("limit", "50"))))
    except ValueError:
        raise ApiError(400, "limit must be a number", ExitCode.BAD_INPUT) from None
    runs = worker.session.journal.list_runs(host=host, limit=limit)
    return JSONResponse({"runs": [
        {**context_summary(r), "terminal": r.terminal,
         "worker_status": worker.runs[r.run_id].status if r.run_id in worker.runs else None}
        for r in runs
    ]})


@_protected
async def get_run(request: Request) -> Response:
    worker: Worker = request.app.state.worker
    try:
        after = int(request.query_params.get("events_after", "0"))
    except ValueError:
        raise ApiError(400, "events_after must be a number", ExitCode.BAD_INPUT) from None
    return JSONResponse(worker.run_detail(request.path_params["run_id"], events_after=after))


@_protected
async def approve_run(request: Request) -> Response:
    worker: Worker = request.app.state.worker
    body = ApproveBody.model_validate(await _json_body(request, optional=True))
    run = worker.get_run(request.path_params["run_id"])
    if run.terminal:
        raise UserError(f"run {run.run_id} already ended {run.outcome}")
    by = _by(request, body.by)
    worker.session.journal.approve(run.run_id, body.gate, by=by)
    worker.log.info("approved", run_id=run.run_id, gate=body.gate, by=by)
    return JSONResponse({"run_id": run.run_id, "gate": body.gate, "approved_by": by})


@_protected
async def abort_run(request: Request) -> Response:
    worker: Worker = request.app.state.worker
    body = AbortBody.model_validate(await _json_body(request, optional=True))
    run = worker.get_run(request.path_params["run_id"])
    if run.terminal:
        raise UserError(f"run {run.run_id} already ended {run.outcome}")
    by = _by(request, body.by)
    worker.session.journal.request_abort(run.run_id, by=by)
    worker.log.info("abort_requested", run_id=run.run_id, by=by)
    lease = worker.session.journal.current_lease(run.host)
    if lease is None or lease.run_id != run.run_id:
        message = (f"abort recorded for {run.run_id}; no runner holds it: "
                   f"`orchestrate resume {run.run_id}` performs the rollback")
        runner = None
    else:
        message = f"abort recorded for {run.run_id}; its runner ({lease.owner}) takes the rollback at its next check"
        runner = lease.owner
    return JSONResponse({"run_id": run.run_id, "abort_requested": True, "runner": runner, "message": message})


def create_app(
    settings: Settings,
    *,
    session_factory: SessionFactory | None = None,
    transport: Any = None,
    clock: Any = None,
    token: str | None = None,
    insecure_no_auth: bool = False,
) -> Starlette:
    """The `orchestrate serve` app.

    `session_factory(settings) -> runner.Session` opens the journal and inventory once (lazily,
    or at startup under a lifespan); by default `Session.open(settings, transport=, clock=)`.
    `token`: the bearer token (default `ORCHESTRATOR_SERVER_TOKEN`); without one the app refuses
    to be built unless `insecure_no_auth` (then every route is open, and a warning is logged).
    """
    if token is None:
        token = ServerConfig().token.get_secret_value()
    token = token.strip() or None
    if token is None and not insecure_no_auth:
        raise UserError(
            "refusing to serve without a token: set ORCHESTRATOR_SERVER_TOKEN "
            "(or pass --insecure-no-auth to serve every route unauthenticated)"
        )
    redactor = Redactor()
    redactor.add(*settings.tokens())
    if token is not None:
        redactor.add(token)
    db_password = urlsplit(settings.database_url).password if settings.database_url else None
    if db_password:
        redactor.add(db_password)
    log = server_logger(redactor)

    def default_factory(s: Settings) -> Session:
        return Session.open(s, transport=transport, clock=clock)

    worker = Worker(settings, session_factory or default_factory, redactor, log)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if token is None:
            log.warning("serving_without_auth", detail="--insecure-no-auth: anyone who reaches this port can roll hosts")
        _ = worker.session  # open the journal now: a wrong URL fails the start, not the first request
        missing = [name for name in ("compose_manager_token", "dashboard_token", "model_proxy_token", "inference_token")
                   if not getattr(settings, name).get_secret_value()]
        if missing:
            log.warning("host_tokens_missing", missing=[f"ORCHESTRATOR_{n.upper()}" for n in missing],
                        detail="runs will fail when they first call a host")
        log.info("serving", journal=journal_kind(settings), owner=owner_id())
        try:
            yield
        finally:
            await worker.shutdown()
            log.info("stopped")

    app = Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/runs", submit_run, methods=["POST"]),
            Route("/runs", list_runs, methods=["GET"]),
            Route("/runs/{run_id}", get_run, methods=["GET"]),
            Route("/runs/{run_id}/approve", approve_run, methods=["POST"]),
            Route("/runs/{run_id}/abort", abort_run, methods=["POST"]),
        ],
        lifespan=lifespan,
    )
    app.state.worker = worker
    app.state.token = token
    return app


def serve(settings: Settings, host: str, port: int, token: str | None, *, insecure_no_auth: bool = False,
          session_factory: SessionFactory | None = None) -> None:
    """Run the app under uvicorn until SIGINT/SIGTERM (then running tasks are cancelled)."""
    import uvicorn

    app = create_app(settings, token=token, insecure_no_auth=insecure_no_auth, session_factory=session_factory)
    _ = app.state.worker.session  # fail before binding the port: a wrong journal URL or inventory
    config = uvicorn.Config(app, host=host, port=port, lifespan="on", log_level="info",
                            timeout_graceful_shutdown=10, server_header=False)
    uvicorn.Server(config).run()


__all__ = ["ServerConfig", "create_app", "serve", "journal_kind", "Worker", "ActiveRun"]
