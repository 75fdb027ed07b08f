"""Starting, continuing and finishing runs: journal, lease, clients, per-run log file, executor.

The CLI, `orchestrate demo`, `orchestrate serve` and the end-to-end tests all go through here, so
every path runs the same code against whatever transport and clock they are given.

This module makes the runs (`new_rollout`, `new_rollback`, `retry_run`) and runs them (`execute`);
the checks they make live beside it (session, refusals, tier_checks, host_reads, run_info).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import structlog

from orchestrator.engine.executor import Executor, RunContext, RunnerFenced, run_with_heartbeat
from orchestrator.engine.fleet import default_runbook, journal_overrides
from orchestrator.engine.progress import CompositeProgress, NullProgress, Progress
from orchestrator.engine.rules.oneshot_ledger import removed_oneshots
from orchestrator.engine.run_logs import ROUTER, open_run_log
from orchestrator.hosts.host_clients import build_host_clients
from orchestrator.journal import audit
from orchestrator.journal.base import LeaseHeld, LeaseLost, RunRecord
from orchestrator.journal.owner import describe_owner, holder_gone
from orchestrator.language.machine import HALTED, Table, compile_rollback, compile_rollout
from orchestrator.language.runbook import Runbook, load_recorded_runbook, read_runbook
from orchestrator.service import admission, incident

# tests and the explorer patch validate_rollback_targets and refuse_tier_short on this module
from orchestrator.service.host_reads import refuse_alone, refuse_nothing_to_roll_back, validate_rollback_targets
from orchestrator.service.notify import FLUSH_S, NotifyProgress
from orchestrator.service.oncall import never_rolled_out
from orchestrator.service.refusals import (
    _require_earlier_phases_passed,
    last_changing_rollout,
    leased_refusal,
    refuse_if_leased,
    refuse_missing_sources,
    refuse_stale_resume,
    refuse_unreadable_logs,
    refuse_unsettled,
)
from orchestrator.service.run_info import check_tag
from orchestrator.service.session import RUNBOOK_IDENTITY, RUNBOOK_TEXT, Session, notifier_for, owner_id
from orchestrator.service.tier_checks import refuse_tier_busy, refuse_tier_short
from orchestrator.util.user_errors import Refused, UserError


async def execute(
    session: Session,
    run: RunRecord,
    rb: Runbook,
    table: Table,
    *,
    progress: Progress | None = None,
    yes: bool = False,
    soak: float | None = None,
) -> RunRecord:
    """Take the host's lease, run the executor to a terminal state, release the lease.

    The lease is released on every way out except a fencing (then it is someone else's): a
    failure while setting up (before the executor acted), a bug, and a cancellation. Cancelling
    is how Ctrl-C stops a run (service/stoppable.py): the executor's journal writes are synchronous, so a
    cancellation lands at an await between two writes; the journal already says where the run
    is, and `orchestrate resume` continues from there. A lease whose holder process is gone
    (same machine, journal/owner.py) is taken over at once instead of waiting for its TTL.
    """
    entry = session.inventory.host(run.host)
    owner = owner_id()
    admitted = session.admitted.pop(run.run_id, None)
    try:
        if admitted is not None:  # admission took the lease with the run
            lease, taken = admitted.lease, admitted.took_over
        else:
            lease, taken = session.journal.acquire_lease(run.host, run.run_id, owner, session.settings.lease_ttl,
                                                         takeover_if=lambda held: holder_gone(held.owner))
    except LeaseHeld as exc:
        raise Refused(leased_refusal(run.host, exc.holder_run_id, exc.owner, exc.expires_at,
                                     f"run {run.run_id} was not started")) from None

    audit.record_start(session.journal, run, audit.cli_actor())  # who: the server journals its own first
    progress = progress or NullProgress()
    notifier, own_notifier = session.notifier, None
    if notifier is None and session.settings.notify_url.get_secret_value():
        notifier = own_notifier = notifier_for(session)
    if notifier is not None:
        progress = CompositeProgress(progress, NotifyProgress(notifier, run_id=run.run_id, host=run.host, kind=run.kind,
                                                              tag=run.tag, public_url=session.settings.public_url))
    ex: Executor | None = None
    clients = None
    fenced = False
    try:
        if taken is not None:
            expired = taken.expires_at <= datetime.now(timezone.utc)
            what = "the expired lease" if expired else "the lease"
            why = "" if expired else ": its process is gone"
            progress.event("note", clock=session.clock.monotonic(),
                           text=f"took over {what} of run {taken.run_id} ({describe_owner(taken.owner)}){why}")
        log_path = open_run_log(session.settings.state_dir, run.run_id, session.redactor)
        progress.event("note", clock=session.clock.monotonic(), text=f"journal: {session.settings.journal_location()}  log: {log_path}")
        clients = build_host_clients(session.settings, session.inventory, entry, session.redactor,
                                     transport=session.transport, retry=session.retry, clock=session.clock)
        ex = Executor(
            run=run, runbook=rb, table=table, journal=session.journal, lease=lease, clients=clients, entry=entry,
            clock=session.clock, poll_interval=session.settings.poll_interval, redactor=session.redactor,
            progress=progress, yes=yes, soak_override=soak,
        )
        ex.rt.log_probe_interval = session.settings.log_probe_interval
        try:
            # every log event of this task (clients included) carries the run: routed to its file
            with structlog.contextvars.bound_contextvars(run_id=run.run_id, host=run.host):
                final = await run_with_heartbeat(ex, session.journal, session.settings.lease_ttl)
        except RunnerFenced as exc:
            progress.event("note", clock=session.clock.monotonic(), text=f"this runner lost the lease of {run.host}: {exc}")
            fenced = True  # the lease is someone else's now: nothing to release
            raise
    except BaseException:
        if not fenced:
            _release_quietly(session, ex.lease if ex is not None else lease)
        raise
    finally:
        if clients is not None:
            await clients.aclose()
        if own_notifier is not None:
            await own_notifier.aclose(FLUSH_S)
        ROUTER.close(run.run_id)
    session.journal.release(ex.lease)
    return final


def _release_quietly(session: Session, lease: Any) -> None:
    """Release on the way out of a run that stopped without finishing. A lease already taken over
    or released (LeaseLost) is not ours; a journal that fails now must not hide why the run
    stopped (the lease then lapses at its TTL, or at once for a resume on this machine)."""
    try:
        session.journal.release(lease)
    except LeaseLost:
        pass
    except Exception:  # noqa: BLE001 - the exception on its way out is the one to report
        structlog.get_logger().warning("lease_release_failed", host=lease.host, run_id=lease.run_id)


def new_rollout(session: Session, host: str, tag: str, runbook: str,
                start_phase: str | None = None, *, skip_tag_age_check: bool = False,
                overrides: Sequence[str] | None = None) -> tuple[RunRecord, Runbook, Table]:
    """A rollout run. `start_phase` (from `--continue`, after `place_for_continue`) starts the
    procedure part-way; preflight's host-state check confirms the host is still there.
    `overrides` (the CLI's `--override-prerequisite`, () for none): the runbook's prerequisites
    are checked at admission and the overrides journaled with the run; None leaves both to the
    run's own `check: prerequisites` gate (callers that journal overrides themselves)."""
    check_tag(tag)
    session.inventory.host(host)
    refuse_if_leased(session, host)
    rb, identity, text = read_runbook(runbook)
    if host not in rb.hosts:
        raise UserError(f"runbook {rb.name} is written for {', '.join(rb.hosts)}, not {host}: pick the host's runbook with --runbook")
    refuse_missing_sources(session.inventory.host(host), host, rb)
    refuse_unreadable_logs(session, host, rb)
    refuse_unsettled(session, host)
    try:
        table = compile_rollout(rb, start_phase)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    ctx = RunContext.new(start_phase=start_phase, skip_tag_age_check=skip_tag_age_check,
                         extra={RUNBOOK_IDENTITY: identity, RUNBOOK_TEXT: text})
    if start_phase is not None:
        # a continued rollout keeps the rollback targets of the run that started it
        for earlier in session.journal.list_runs(host, limit=50):
            before = RunContext.from_json(earlier.context)
            prev = before.previous
            if earlier.kind == "rollout" and earlier.tag == tag and prev:
                ctx.previous = dict(prev)
                ctx.previous_source = f"run {earlier.run_id}"
                # and its container ledger: the continued rollout's rollbacks may stop what that run started
                ctx.created, ctx.stopped = dict(before.created), dict(before.stopped)
                break
    checks = [] if start_phase is None else [lambda: _require_earlier_phases_passed(session, host, tag, rb, start_phase)]
    after = None
    if overrides is not None:
        checks.append(admission.prerequisites_hold(session, rb, overrides))
        if overrides:
            after = lambda r: journal_overrides(session.journal, r, overrides, owner_id(), rb)  # noqa: E731
    got = admission.admit(session, host=host, rb=rb, checks=checks, after=after,
                          create=dict(host=host, runbook=rb.name, tag=tag, kind="rollout", state=table.start,
                                      context=ctx.to_json()))
    session.admitted[got.run.run_id] = got
    return got.run, rb, table


def retry_run(session: Session, run: RunRecord) -> tuple[RunRecord, Runbook, Table]:
    """`resume --retry`: a halted rollout starts its failed phase again, as a new run."""
    if run.outcome != HALTED or run.kind != "rollout":
        raise UserError(f"run {run.run_id} is {run.outcome or run.state}: --retry is for a halted rollout")
    if session.journal.open_effects(run.run_id):
        raise Refused(f"run {run.run_id} halted with a compose call whose outcome is unknown: look at the host "
                      f"(`orchestrate status {run.run_id}`) before retrying. Nothing was changed")
    refuse_stale_resume(session, run)
    rb = load_recorded_runbook(run.runbook, run.context.get(RUNBOOK_IDENTITY), run.context.get(RUNBOOK_TEXT))
    table = compile_rollout(rb)
    failed = (run.context.get("failure") or {}).get("state")
    if not failed or failed not in table.nodes:
        raise UserError(f"run {run.run_id} has no failed step to retry from")
    phase = table.nodes[failed].phase
    if phase is None or phase not in table.phase_starts:
        raise UserError(f"run {run.run_id} failed in {failed}, which is not a forward phase: --retry restarts a forward phase")
    start = table.retry_start(phase)
    ctx = RunContext.from_json(run.context).for_retry()

    got = admission.admit(session, host=run.host, rb=rb, checks=[lambda: refuse_stale_resume(session, run)],
                          create=dict(host=run.host, runbook=rb.name, tag=run.tag, kind="rollout", state=start,
                                      context=ctx.to_json(), parent_run_id=run.run_id))
    session.admitted[got.run.run_id] = got
    return got.run, rb, table


async def new_rollback(session: Session, host: str, replica: str, runbook: str | None,
                       to_tag: str | None, to_file: str | None) -> tuple[RunRecord, Runbook, Table]:
    session.inventory.host(host)
    refuse_if_leased(session, host)
    last = last_changing_rollout(session, host)
    rb, identity, text = read_runbook(rollback_runbook(session, host, runbook))
    refuse_unreadable_logs(session, host, rb)
    refuse_unsettled(session, host)
    refuse_tier_busy(session, host, rb)
    # the whole-host rollback goes in the runbook's safe order (its full_rollback phases)
    replicas = rb.rollback_replicas(replica)
    if (to_tag is None) != (to_file is None):
        raise UserError("--to-tag and --to-file go together")
    if to_tag is not None:
        check_tag(to_tag)
        previous = {svc: {"tag": to_tag, "file": to_file or "", "commit": ""} for svc in rb.previous_refs()}
        source = "--to-tag/--to-file" if last is not None else incident.EXPLICIT
    elif last is not None:
        previous = dict(RunContext.from_json(last.context).previous)
        source = f"run {last.run_id}"
    else:  # nothing this journal moved: the host's own history says whether any rollout moved it
        history = await incident.host_history(session, host, rb)
        if history.new_tag is None:  # never rolled out by anyone: one message, the one command that forces it
            raise Refused(never_rolled_out(host, session.settings.journal_location()))
        # rolled out from another journal (another machine, team mode's database): name it and the exact command
        raise Refused(incident.no_journal_message(session, host, rb, history, "no rollout of this host is journaled here"))
    missing = [s for s in rb.previous_refs() if s not in previous]
    if missing and last is None:  # refused naming this machine's journal and a target from the action log
        raise Refused(incident.no_journal_message(
            session, host, rb, await incident.host_history(session, host, rb),
            f"cannot establish the previous tag and file of {', '.join(missing)} from compose-manager (it remembers "
            f"only its last two successful ups)"))
    if missing:
        raise Refused(f"cannot establish the previous tag and file of {', '.join(missing)} from {source}: pass --to-tag and --to-file")
    tag = last.tag if last is not None else await _tag_without_journal(session, host, rb, explicit=to_tag is not None)
    if replica != "all":
        await refuse_alone(session, host, rb, replica, last)
    if to_tag is None and rb.host_states:  # read-only: docker/ps and one dry run
        await refuse_nothing_to_roll_back(session, host, rb, tag)
    await validate_rollback_targets(session, host, rb, previous)
    await refuse_tier_short(session, host, rb)
    table = compile_rollback(rb, replicas)
    ctx = RunContext.new(previous=previous, replicas=replicas, previous_source=source,
                         extra={RUNBOOK_IDENTITY: identity, RUNBOOK_TEXT: text})
    if last is not None:  # a one-shot the rolled-back runs already removed is not sent a down again
        ctx.oneshots_removed = removed_oneshots(session.journal, host, last.run_id, rb.oneshot_services())

    # the host reads above took time: what they were judged against is judged again, in the
    # transaction that creates the run and takes the leases
    got = admission.admit(session, host=host, rb=rb,
                          checks=[admission.tier_not_busy(session, host, rb),
                                  admission.same_newest_changing_rollout(session, host, last)],
                          create=dict(host=host, runbook=rb.name, tag=tag, kind="rollback", state=table.start,
                                      context=ctx.to_json(), parent_run_id=last.run_id if last else None))
    session.admitted[got.run.run_id] = got
    return got.run, rb, table


def rollback_runbook(session: Session, host: str, runbook: str | None) -> str:
    """The runbook a rollback of `host` follows, for every door (CLI, `--server`, the page): the
    one named, else that of the newest rollout that changed the host (never one that ended
    ABORTED having changed nothing), else the shipped runbook written for the host."""
    if runbook:
        return runbook
    last = last_changing_rollout(session, host)
    return last.runbook if last is not None else default_runbook(host)


async def _tag_without_journal(session: Session, host: str, rb: Runbook, *, explicit: bool) -> str:
    """The tag of the runbook's new file (what the rollback stops), with no journaled rollout:
    only with an explicit target, and read from compose-manager (its last successful up of that
    file, else the newest up of it in the action log)."""
    history = await incident.host_history(session, host, rb)
    if not explicit:
        raise Refused(incident.no_journal_message(session, host, rb, history, "no rollout of this host is journaled here"))
    if history.new_tag is None:
        raise Refused(f"compose-manager on {host} has no up of {rb.file} in its action log: there is nothing of runbook "
                      f"{rb.name}'s rollout to roll back. Nothing was changed")
    return history.new_tag


__all__ = ["execute", "new_rollout", "new_rollback", "rollback_runbook", "retry_run"]
