"""The one admission path: every way a run enters (a start, `--continue`, a rollback, `resume`,
`--retry`, a fleet step, the server's submissions and adoptions) is admitted here, and only here.

Admission is ONE journal transaction (`admit`): the checks that read the journal (no run of the
host left a compose call of unknown outcome, a resumed run is neither ended nor superseded, plus
the door's own checks), the run created or claimed, the host's lease (a dead process's is taken
over), the tier's lease for `capacity: fleet`, and what the door journals. All of it commits or
none does: a check is evaluated again in the transaction that acts, so a world that changed since
(a second terminal, a server) cannot be acted on. Host reads made before admission are advisory
only; the tier lease keeps another run of the tier out of the window between them and admission.
Admissions are serialised across processes (SQLite's write lock, a PostgreSQL advisory lock).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from orchestrator.engine.executor import RunContext
from orchestrator.engine.fleet import default_runbook, journal_overrides, refuse_unmet_prerequisites
from orchestrator.engine.leave_pool import refuse_tier_halted
from orchestrator.engine.rules import targets
from orchestrator.engine.rules.oneshot_ledger import removed_oneshots
from orchestrator.engine.rules.prerequisites import HostWord
from orchestrator.hosts.clients.errors import ClientError
from orchestrator.journal.base import LeaseHeld, RunRecord, TierHeld
from orchestrator.journal.owner import describe_owner, holder_gone, owner_text
from orchestrator.language.machine import HALTED, Table, compile_rollback, compile_rollout
from orchestrator.language.runbook import Runbook, load_recorded_runbook, load_runbook, read_runbook
from orchestrator.service import incident, requests

# tests and the explorer patch validate_rollback_targets and refuse_tier_short on this module
from orchestrator.service.host_reads import (
    place_for_continue,
    refuse_alone,
    refuse_nothing_to_roll_back,
    refuse_tier_short,
    validate_rollback_targets,
)
from orchestrator.service.oncall import kept_options, never_rolled_out
from orchestrator.service.refusals import (
    _require_earlier_phases_passed,
    last_changing_rollout,
    leased_refusal,
    refuse_if_leased,
    refuse_missing_sources,
    refuse_stale_resume,
    refuse_tier_busy,
    refuse_unreadable_logs,
    refuse_unsettled,
)
from orchestrator.service.run_info import check_tag, table_for
from orchestrator.service.session import RUNBOOK_IDENTITY, RUNBOOK_TEXT, Session, owner_id
from orchestrator.service.signals import parse_soak
from orchestrator.util.user_errors import Refused, UserError

Check = Callable[[], None]


def admit(session: Session, *, host: str, rb: Runbook, table: Table | None = None, checks: Sequence[Check] = (),
          create: dict[str, Any] | None = None, claim: str | None = None,
          after: Callable[[RunRecord], object] | None = None) -> requests.Admitted:
    """The one admission transaction (module docstring): `create` (`Journal.create_run`'s keyword
    arguments) or `claim` (a run id to resume). `checks` raise `Refused`/`UserError`; `after(run)`
    journals what the door adds. Nothing is written unless all of it is admitted: then the run,
    its host's lease and its tier's (`capacity: fleet` runbooks) are held."""
    journal = session.journal
    tier = f"capacity:{rb.name}" if rb.capacity == "fleet" else None
    what = f"run {claim} was not resumed" if claim is not None else "nothing was started"
    run: RunRecord | None = None
    try:
        with journal.atomic():
            if claim is not None:
                run = journal.get_run(claim)
                if run.host != host:
                    raise UserError(f"run {claim} is a run of {run.host}, not {host}")
                if run.terminal:
                    raise Refused(f"run {run.run_id} already ended {run.outcome}: {run.message or ''}".rstrip(": "))
                refuse_stale_resume(session, run)
            refuse_unsettled(session, host, except_run=claim)
            for check in checks:
                check()
            if create is not None:
                run = journal.create_run(**create)
            assert run is not None
            lease, took_over = journal.acquire_lease(host, run.run_id, owner_text(), session.settings.lease_ttl,
                                                     takeover_if=lambda held: holder_gone(held.owner))
            if tier is not None:
                journal.claim_tier(tier, host, run.run_id, takeover_if=lambda held: holder_gone(held.owner))
            if after is not None:
                after(run)
            run = journal.get_run(run.run_id)
    except LeaseHeld as exc:
        if run is not None and exc.holder_run_id == run.run_id and claim is not None:
            raise Refused(f"{host} is leased by run {run.run_id} until {exc.expires_at:%Y-%m-%d %H:%M:%S} UTC: run "
                          f"{run.run_id} is being run by {describe_owner(exc.owner)}; resume it only once that runner "
                          f"is gone") from None
        raise Refused(leased_refusal(host, exc.holder_run_id, exc.owner, exc.expires_at, what)) from None
    except TierHeld as exc:
        raise Refused(f"{exc.host} has run {exc.run_id} in flight ({describe_owner(exc.owner)}): one host of the "
                      f"tier ({', '.join(rb.hosts)}) at a time, so {host} is not taken out of it now; {what}. "
                      f"Let that run end, then try again") from None
    got = session.admitted[run.run_id] = requests.Admitted(run, rb, table, lease=lease, took_over=took_over)
    return got  # the lease `execute` runs under


def same_newest_changing_rollout(session: Session, host: str, expected: RunRecord | None) -> Check:
    """A rollback undoes the rollout it read before its (slow) host reads: is it still the newest?"""
    def check() -> None:
        now = last_changing_rollout(session, host)
        if (now.run_id if now else None) != (expected.run_id if expected else None):
            raise Refused(f"run {now.run_id if now else '?'} changed {host} while this rollback was being prepared "
                          f"(it read run {expected.run_id if expected else 'none'}): nothing was started; look at "
                          f"`orchestrate runs --host {host}` and run the rollback again")
    return check


async def prerequisite_words(session: Session, rb: Runbook, overrides: Iterable[str]) -> dict[str, HostWord]:
    """What each prerequisite host's compose-manager says of it (read-only, advisory: another
    machine may have changed it). A host overridden, unknown or not answering is left to the journal."""
    out: dict[str, HostWord] = {}
    skip = set(overrides)
    for p in rb.prerequisites:
        entry = session.inventory.hosts.get(p.host)
        if p.host in skip or entry is None:
            continue
        try:
            actions, current = await incident.host_ups(session, entry)
        except ClientError:
            continue
        out[p.host] = HostWord(actions, current, load_runbook(p.runbook).file)
    return out


def tier_not_busy(session: Session, host: str, rb: Runbook) -> Check:
    def check() -> None:
        refuse_tier_busy(session, host, rb)
        refuse_tier_halted(session.journal, rb, host)  # a tier host HALTED outside the pool (journal)
    return check


def new_rollout(session: Session, host: str, tag: str, runbook: str,
                start_phase: str | None = None, *, skip_tag_age_check: bool = False,
                overrides: Sequence[str] | None = None) -> tuple[RunRecord, Runbook, Table]:
    """A rollout run; `start_phase` (`--continue`) starts it part-way. `overrides` (() for none):
    the prerequisites are checked at admission (their hosts asked too: the caller is synchronous)
    and the overrides journaled; None leaves both to the run's `check: prerequisites` gate."""
    check_tag(tag)
    session.inventory.host(host)
    refuse_if_leased(session, host)
    rb, identity, text = read_runbook(runbook)
    if host not in rb.hosts:
        raise UserError(f"runbook {rb.name} is written for {', '.join(rb.hosts)}, not {host}: pick the host's runbook with --runbook")
    refuse_missing_sources(session.inventory.host(host), host, rb, session.inventory.hosts)
    refuse_unreadable_logs(session, host, rb)
    refuse_unsettled(session, host)
    try:
        table = compile_rollout(rb, start_phase)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    ctx = RunContext(start_phase=start_phase, skip_tag_age_check=skip_tag_age_check,
                     extra={RUNBOOK_IDENTITY: identity, RUNBOOK_TEXT: text})
    if start_phase is not None:
        # a continued rollout keeps the rollback targets of the run that started it
        for earlier in session.journal.list_runs(host, limit=50):
            before = RunContext.from_json(earlier.context)
            if earlier.kind == "rollout" and earlier.tag == tag and before.previous:
                ctx.previous, ctx.previous_source = dict(before.previous), f"run {earlier.run_id}"
                # and its container ledger: the continued rollout's rollbacks may stop what that run started
                ctx.created, ctx.stopped = dict(before.created), dict(before.stopped)
                break
    checks = [] if start_phase is None else [lambda: _require_earlier_phases_passed(session, host, tag, rb, start_phase)]
    after = None
    if overrides is not None:
        words = asyncio.run(prerequisite_words(session, rb, overrides)) if rb.prerequisites else None
        checks.append(lambda: refuse_unmet_prerequisites(rb, session.journal, list(overrides), words=words))
        if overrides:
            after = lambda r: journal_overrides(session.journal, r, overrides, owner_id(), rb)  # noqa: E731  # a one-line hook, read where it is passed
    got = admit(session, host=host, rb=rb, checks=checks, after=after, create=dict(
        host=host, runbook=rb.name, tag=tag, kind="rollout", state=table.start, context=ctx.to_json()))
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
    failure = run.context.get("failure") or {}
    failed = failure.get("state")
    if not failed or failed not in table.nodes:
        raise UserError(f"run {run.run_id} has no failed step to retry from")
    phase = table.nodes[failed].phase
    if phase is None or phase not in table.phase_starts:
        raise UserError(f"run {run.run_id} failed in {failed}, which is not a forward phase: --retry restarts a forward phase")
    # a call the host refused without acting is sent again at its own step; any other failure
    # starts its phase again where the table says
    start = failure.get("retry_at") if failure.get("retry_at") in table.nodes else table.retry_start(phase)
    ctx = RunContext.from_json(run.context).for_retry()
    got = admit(session, host=run.host, rb=rb, checks=[lambda: refuse_stale_resume(session, run)], create=dict(
        host=run.host, runbook=rb.name, tag=run.tag, kind="rollout", state=start, context=ctx.to_json(),
        parent_run_id=run.run_id))
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
        source = targets.EXPLICIT_BESIDE_JOURNAL if last is not None else targets.EXPLICIT
    elif last is not None:
        previous = dict(RunContext.from_json(last.context).previous)
        source = f"run {last.run_id}"
    else:  # nothing this journal moved: did any rollout (another journal's) move the host?
        history = await incident.host_history(session, host, rb)
        if history.new_tag is None:
            raise Refused(never_rolled_out(host, session.settings.journal_location()))
        raise Refused(incident.no_journal_message(session, host, rb, history, "no rollout of this host is journaled here"))
    missing = [s for s in rb.previous_refs() if s not in previous]  # none with an explicit target
    if missing:
        raise Refused(f"cannot establish the previous tag and file of {', '.join(missing)} from {source}: pass --to-tag and --to-file")
    if last is not None:
        tag = last.tag
    else:  # an explicit target: the tag of the new file (what the rollback stops), as compose-manager says
        tag = (await incident.host_history(session, host, rb)).new_tag
        if tag is None:
            raise Refused(f"compose-manager on {host} has no up of {rb.file} in its action log: there is nothing of "
                          f"runbook {rb.name}'s rollout to roll back. Nothing was changed")
    if replica != "all":
        await refuse_alone(session, host, rb, replica, last)
    if to_tag is None and rb.host_states:  # read-only: docker/ps and one dry run
        await refuse_nothing_to_roll_back(session, host, rb, tag)
    await validate_rollback_targets(session, host, rb, previous, replicas, explicit=to_tag is not None)
    await refuse_tier_short(session, host, rb)
    table = compile_rollback(rb, replicas)
    ctx = RunContext(previous=previous, replicas=replicas, previous_source=source,
                     extra={RUNBOOK_IDENTITY: identity, RUNBOOK_TEXT: text})
    if last is not None:  # a one-shot the rolled-back runs already removed is not sent a down again
        ctx.oneshots_removed = removed_oneshots(session.journal, host, last.run_id, rb.oneshot_services())
    # the host reads above took time: what they were judged against is judged again at admission
    got = admit(session, host=host, rb=rb,
                checks=[tier_not_busy(session, host, rb), same_newest_changing_rollout(session, host, last)],
                create=dict(host=host, runbook=rb.name, tag=tag, kind="rollback", state=table.start,
                            context=ctx.to_json(), parent_run_id=last.run_id if last else None))
    return got.run, rb, table


def rollback_runbook(session: Session, host: str, runbook: str | None) -> str:
    """The runbook a rollback of `host` follows: the one named, else the newest changing rollout's,
    else the shipped runbook written for the host."""
    if runbook:
        return runbook
    last = last_changing_rollout(session, host)
    return last.runbook if last is not None else default_runbook(host)


def admit_rollout(session: Any, req: requests.RolloutRequest, *, soak_name: str = "--soak") -> requests.Admitted:
    """A new rollout run (`--continue`: the host placed first, read-only)."""
    soak = parse_soak(req.soak, soak_name)
    start_phase = asyncio.run(place_for_continue(session, req.host, req.tag, req.runbook)) if req.continue_ else None
    run, rb, table = new_rollout(session, req.host, req.tag, req.runbook, start_phase,
                                 skip_tag_age_check=req.skip_tag_age_check, overrides=req.overrides)
    return requests.Admitted(run, rb, table, yes=req.yes, soak=soak, soak_text=req.soak)


def admit_rollback(session: Any, req: requests.RollbackRequest, *, soak_name: str = "--soak") -> requests.Admitted:
    """A new rollback run (its targets dry-run before anything is stopped; its own loop: the
    server calls this in a thread)."""
    soak = parse_soak(req.soak, soak_name)
    run, rb, table = asyncio.run(new_rollback(session, req.host, req.replica, req.runbook, req.to_tag, req.to_file))
    return requests.Admitted(run, rb, table, yes=req.yes, soak=soak, soak_text=req.soak)


def resume_options(run: RunRecord, req: requests.ResumeRequest, *,
                   soak_name: str = "--soak") -> tuple[bool, str | None, float | None, str]:
    """(yes, soak as given, soak seconds, what was kept): the run's own options unless given again;
    an adoption (no human asked) never keeps `--yes`."""
    yes, soak_text, kept = kept_options(run, yes=req.yes, soak=req.soak)
    return yes and not req.adopting, soak_text, parse_soak(soak_text, soak_name), kept


def admit_resume(session: Any, run: RunRecord, req: requests.ResumeRequest, *, checked: Any = None,
                 soak_name: str = "--soak") -> requests.Admitted:
    """`resume` (or `--retry`: the failed phase as a new run). `checked`: the runbook the caller
    verified against the run's pinned identity."""
    yes, soak_text, soak, _ = resume_options(run, req, soak_name=soak_name)
    if req.retry:
        new_run, rb, table = retry_run(session, run)
        return requests.Admitted(new_run, rb, table, yes=yes, soak=soak, soak_text=soak_text, new=True)
    rb = checked or load_recorded_runbook(run.runbook, run.context.get(RUNBOOK_IDENTITY), run.context.get(RUNBOOK_TEXT))
    admitted = admit(session, host=run.host, rb=rb, table=table_for(run, rb), claim=run.run_id)
    return replace(admitted, yes=yes, soak=soak, soak_text=soak_text, new=False)
