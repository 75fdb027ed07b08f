"""A submission to the server, prepared in a worker thread before it is answered: checked and
admitted through the service's one admission path (orchestrator/service/admission.py), the host's
lease held (a busy host is a 409 to the submitter), the runbook's identity recorded in the run's
context, and who submitted it journaled.

`SubmissionMixin` is a part of the server's `Worker` (orchestrator/server/worker.py); it uses
the worker's `session`, `runs`, `settings`, `redactor`, `log` and `_remember`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import anyio.to_thread

from orchestrator.journal import audit
from orchestrator.journal.base import LeaseHeld, RunRecord
from orchestrator.language.machine import Table
from orchestrator.language.runbook import Runbook, default_runbook, load_recorded_runbook, load_runbook_checked
from orchestrator.server.run_state import ActiveRun
from orchestrator.server.schemas import ResumeBody, RollbackBody, RolloutBody
from orchestrator.service import signals
from orchestrator.service.admission import admit_resume, admit_rollback, admit_rollout, resume_options
from orchestrator.service.session import RUNBOOK_TEXT
from orchestrator.service.requests import ResumeRequest, RollbackRequest, RolloutRequest
from orchestrator.service.refusals import refuse_if_leased
from orchestrator.service.run_info import check_tag
from orchestrator.service.admission import rollback_runbook
from orchestrator.service.session import owner_id
from orchestrator.util.exit_codes import OUTCOME_EXIT, ExitCode
from orchestrator.util.user_errors import Refused, UserError

#: The run-context key of the runbook's identity: {"name": ..., "sha256": ...}.
IDENTITY_KEY = "runbook_identity"


@dataclass
class _Prepared:
    run: RunRecord
    rb: Runbook
    table: Table
    yes: bool
    soak: float | None
    took_over: str | None


def _server_name() -> str:
    """This server as the audit list names it: `pid N on machine` (never the raw lease owner)."""
    from orchestrator.journal.owner import describe_owner

    return describe_owner(owner_id())


def _in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    return anyio.to_thread.run_sync(fn, *args)


class SubmissionMixin:
    """The Worker's submission path: prepare (check, admit, lease, identity) and journal who."""

    def _prepare(self, body: RolloutBody | RollbackBody | ResumeBody, by: str | None = None,
                 adopting: bool = False) -> _Prepared:
        """In a worker thread: check, journal the run, take its lease, record the runbook identity."""
        s = self.session
        # the service's admission, exactly as the CLI's (orchestrator/service/admission.py)
        pinned = None
        kept_note = None  # a person's resume that keeps the run's --yes says so (issue 21)
        if isinstance(body, RolloutBody):
            req = RolloutRequest(host=body.host, tag=body.tag, runbook=body.runbook or default_runbook(body.host), yes=body.yes,
                                 soak=body.soak)
            signals.parse_soak(req.soak, "soak")
            check_tag(req.tag)
            s.inventory.host(req.host)
            self._refuse_if_busy(req.host)
            checked, digest = load_runbook_checked(req.runbook)
            # admitted with the runbook's prerequisites checked (no override through the server)
            adm = admit_rollout(s, req, soak_name="soak")
        elif isinstance(body, RollbackBody):
            signals.parse_soak(body.soak, "soak")
            s.inventory.host(body.host)
            self._refuse_if_busy(body.host)
            name = rollback_runbook(s, body.host, body.runbook)  # the CLI's choice, whatever the door
            checked, digest = load_runbook_checked(name)
            adm = admit_rollback(s, RollbackRequest(host=body.host, replica=body.replica, runbook=name, to_tag=body.to_tag,
                                                    to_file=body.to_file, yes=body.yes, soak=body.soak), soak_name="soak")
        else:
            run = self._get_run(body.run_id)
            req_r = ResumeRequest(run_id=run.run_id, retry=body.retry, yes=body.yes, soak=body.soak, adopting=adopting)
            # the run's own options, unless given (a bad --soak: 400); an adoption never keeps --yes
            kept_yes, _, _, kept = resume_options(run, req_r, soak_name="soak")
            if kept_yes and not body.yes:
                kept_note = kept
            mine = self.runs.get(run.run_id)
            if mine is not None and mine.active:
                raise Refused(f"run {run.run_id} is already running on this server")
            identity = run.context.get(IDENTITY_KEY) or {}
            pinned = identity.get("sha256") if isinstance(identity, dict) else None
            if body.retry:
                self._refuse_if_busy(run.host)
                checked, digest = _recorded(run, pinned)
                adm = admit_resume(s, run, req_r, soak_name="soak")
            else:
                if run.terminal:
                    raise UserError(f"run {run.run_id} already ended {run.outcome}: {run.message or ''}".rstrip(": "),
                                    code=OUTCOME_EXIT.get(run.outcome or "", ExitCode.UNEXPECTED))
                checked, digest = _recorded(run, pinned)
                # the one admission path: a run superseded by a later run of its host is refused
                # here exactly as on the CLI (an adoption included)
                adm = admit_resume(s, run, req_r, checked=checked, soak_name="soak")
        # admission journaled the runbook it read (its text and identity) with the run: that text
        # is what the run executes, whatever happens to the file now, so nothing is compared here
        run, rb, table, yes, soak, new = adm.run, adm.rb, adm.table, adm.yes, adm.soak, adm.new
        lease, took_over = self._claim(run, new=new)
        took_over = "; ".join(x for x in (took_over, kept_note) if x) or None
        if not run.context.get(IDENTITY_KEY):  # a run journaled without one: pin the file checked above
            s.journal.update_context(lease, run.run_id, {**run.context, IDENTITY_KEY: {"name": run.runbook, "sha256": digest}})
            run = s.journal.get_run(run.run_id)
        return _Prepared(run, rb, table, yes, soak, took_over)

    def _audit_submission(self, run_id: str, body: Any, by: str) -> None:
        try:
            self._record_submission(run_id, body, by)
        except Exception as exc:  # noqa: BLE001 - the run is prepared and leased: it starts whatever happens here
            self.log.warning("audit_not_recorded", run_id=run_id, error=self.redactor.scrub(f"{type(exc).__name__}: {exc}"))

    def _record_submission(self, run_id: str, body: Any, by: str) -> None:
        if isinstance(body, ResumeBody):
            audit.record(self.session.journal, run_id, "resumed", by,
                         f"{'retry ' if body.retry else ''}via the server {_server_name()}")
        else:
            audit.record(self.session.journal, run_id, "submitted", by, f"{body.action} via the server {_server_name()}")

    def _refuse_if_busy(self, host: str) -> None:
        """Before journaling a new run: is the host visibly leased (here or by anyone)?"""
        for r in list(self.runs.values()):
            if r.host == host and r.active:
                raise Refused(f"{host} is being rolled by run {r.run_id} on this server: one rollout per host at a time")
        refuse_if_leased(self.session, host)

    def _claim(self, run: RunRecord, *, new: bool) -> tuple[Any, str | None]:
        """The host's lease for the run, so a busy host is a 409 to the submitter: the one its
        admission took (orchestrator/service/admission.py; `execute` runs under it), else taken now.

        A new run journaled a moment before another runner won the lease is left unstarted.
        """
        admitted = self.session.admitted.get(run.run_id)
        if admitted is not None:
            taken = admitted.took_over
            return admitted.lease, (None if taken is None else
                                    f"took over the expired lease of run {taken.run_id} ({taken.owner})")
        try:
            lease, taken = self.session.journal.acquire_lease(run.host, run.run_id, owner_id(), self.settings.lease_ttl)
        except LeaseHeld as exc:
            if exc.holder_run_id == run.run_id:
                raise Refused(
                    f"run {run.run_id} is being run by {exc.owner} (lease until {exc.expires_at:%Y-%m-%d %H:%M:%S} UTC): "
                    f"resume it only once that lease has expired"
                ) from None
            if new:
                self._remember(ActiveRun(run.run_id, run.host, status="refused", error=self.redactor.scrub(str(exc))))
            raise Refused(signals.lease_refused(run.host, exc.holder_run_id, exc.owner, exc.expires_at,
                                                 f"run {run.run_id} was not started")) from None
        if taken is None:
            return lease, None
        return lease, f"took over the expired lease of run {taken.run_id} ({taken.owner})"


def _recorded(run: RunRecord, pinned: str | None) -> tuple[Runbook, str | None]:
    """(runbook, sha256) a resume runs with: the text the run recorded when it has one (the file
    on disk is not read), else the shipped file of that name, refused if it changed since."""
    text = run.context.get(RUNBOOK_TEXT)
    if isinstance(text, str) and pinned:
        return load_recorded_runbook(run.runbook, run.context.get(IDENTITY_KEY), text), pinned
    return load_runbook_checked(run.runbook, pinned)
