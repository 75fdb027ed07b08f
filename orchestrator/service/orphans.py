"""Ending a run that nobody drives (`orchestrate abort RUN`, the page's Abort): an unfinished run
blocks its tier, so it must always have a way to end. A run a live runner holds is never ended
here (the runner acts on the abort); nor is a resumable run that changed its host (`orchestrate
resume` performs the phase's rollback, never leaving the host half-changed). Any other orphan
ends now with what the host shows (read only): ABORTED if it changed nothing, else HALTED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.hosts.clients.errors import ClientError
from orchestrator.journal.base import LeaseHeld, RunRecord, StateConflict
from orchestrator.journal.owner import describe_owner, holder_gone
from orchestrator.language.runbook import load_runbook
from orchestrator.service.host_reads import tier_listing
from orchestrator.service.refusals import refuse_stale_resume
from orchestrator.service.session import _compose_client
from orchestrator.util.outcome import Outcome
from orchestrator.util.user_errors import Refused, UserError

if TYPE_CHECKING:  # pragma: no cover
    from orchestrator.language.runbook import Runbook
    from orchestrator.service.session import Session


def superseded_by(session: Session, run: RunRecord) -> str | None:
    """Why `run` can no longer be resumed (a later run acted on its host), or None."""
    try:
        refuse_stale_resume(session, run)
    except Refused as exc:
        return str(exc).split(":", 1)[0]
    return None


async def read_host(session: Session, run: RunRecord, rb: Runbook | None) -> str:
    """`host now: ...`: the runbook's engines running, and whether the peers route to a `capacity:
    fleet` host. Read-only."""
    entry = session.inventory.host(run.host)
    parts: list[str] = []
    try:
        async with _compose_client(session, entry) as cm:
            containers = await cm.ps(entry.project)
        running = {c.service or c.name: c.state for c in containers if c.state in ("running", "restarting")}
        if rb is not None and rb.replicas:
            for replica, engines in rb.replicas.items():
                up = [e for e in engines if e in running]
                parts.append(f"{replica}: {', '.join(up) if up else 'no engine running'}")
        else:
            parts.append("running: " + (", ".join(sorted(running)) or "nothing"))
    except ClientError as exc:
        parts.append(f"docker/ps could not be read ({type(exc).__name__}): the host's state is unknown")
    if rb is not None and rb.capacity == "fleet":
        why = (await tier_listing(session, rb, [run.host]))[run.host]
        parts.append(f"NOT routed to by the model-proxy peers ({'; '.join(why)})" if why else
                     f"in the pool: both peers list it healthy under {rb.domains.of('base')}")
    return f"host now: {'; '.join(parts)}"


async def end_unowned(session: Session, run: RunRecord, by: str) -> str | None:
    """End `run` if nobody drives it (module docstring): the line to show, or None."""
    journal = session.journal
    lease = journal.current_lease(run.host)  # unreleased and unexpired
    if lease is not None and lease.run_id == run.run_id and not holder_gone(lease.owner):
        return None  # a live runner: it acts on the abort request
    effects = journal.effects(run.run_id)
    changed = [e for e in effects if e.mutating]
    unknown = [e for e in changed if e.outcome is None]
    stale = superseded_by(session, run)
    if changed and stale is None:
        return None  # resumable: `orchestrate resume` performs the phase's rollback
    try:
        rb = load_runbook(run.runbook)
    except (UserError, ValueError):
        rb = None
    host_now = await read_host(session, run, rb)
    if not changed:
        outcome = Outcome.ABORTED
        text = (f"aborted by {by} with no runner driving it, at {run.state}: this run sent nothing that changes "
                f"{run.host}. {host_now}")
    else:
        outcome = Outcome.HALTED
        calls = f"{len(changed)} changing call{'s' if len(changed) != 1 else ''}"
        if unknown:
            calls += f", {len(unknown)} of them with an unknown outcome"
        text = (f"ended by {by} with no runner driving it, at {run.state}: it made {calls} on {run.host} and is not "
                f"continued ({stale}). {host_now}. Look at the host; `orchestrate rollback {run.host}` puts it back")
    try:
        journal.end_without_runner(run.run_id, run.state, str(outcome), text, note=f"no runner: ended by {by}",
                                   takeover_if=lambda held: holder_gone(held.owner))
    except LeaseHeld as exc:
        raise Refused(f"run {run.run_id} is being run by {describe_owner(exc.owner)}: its runner acts on the abort") from None
    except StateConflict as exc:
        raise Refused(f"run {run.run_id} moved while it was being ended ({exc}): look again with "
                      f"`orchestrate status {run.run_id}`") from None
    return f"run {run.run_id} ended {outcome}: {text}"
