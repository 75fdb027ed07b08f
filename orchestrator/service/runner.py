"""Starting, continuing and finishing runs: journal, lease, clients, per-run log file, executor.

The CLI, `orchestrate demo`, `orchestrate serve` and the end-to-end tests all go through here, so
every path runs the same code against whatever transport and clock they are given.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import httpx
import structlog

from orchestrator.hosts.clients.compose_manager import ComposeManagerClient
from orchestrator.hosts.clients.retry import RetryPolicy
from orchestrator.util.clock import Clock, RealClock, ScaledClock, clock_for
from orchestrator.engine.executor import Executor, RunContext, RunnerFenced, run_with_heartbeat
from orchestrator.engine.executor.targets import group_targets, newest_successful
from orchestrator.hosts.host_clients import build_host_clients
from orchestrator.hosts.inventory import HostEntry, Inventory, load_inventory
from orchestrator.journal.base import Journal, LeaseHeld, LeaseLost, RunRecord
from orchestrator.journal.owner import describe_owner, holder_gone, owner_text
from orchestrator.service import incident
from orchestrator.language.machine import ABORTED, HALTED, Table, compile_rollback, compile_rollout
from orchestrator.service.notify import FLUSH_S, Notifier, NotifyProgress
from orchestrator.engine.progress import CompositeProgress, NullProgress, Progress
from orchestrator.service.startup import open_journal_for
from orchestrator.hosts.redaction import Redactor
from orchestrator.engine.run_logs import ROUTER, open_run_log
from orchestrator.language.runbook import Runbook, identity_of, load_recorded_runbook, load_runbook
from orchestrator.util.settings import Settings
from orchestrator.util.user_errors import Refused, UserError

#: The run-context key of the runbook a run started with (name, path, sha256); the server uses it too.
RUNBOOK_IDENTITY = "runbook_identity"

# check_tag, TAG_RE, table_for, context_summary: in orchestrator/service/run_info.py (the read-only commands
# import them without loading this module), re-exported here
from orchestrator.service.run_info import TAG_RE, check_tag, context_summary, table_for  # noqa: E402,F401


def owner_id() -> str:
    """`HOSTNAME:PID:BOOT_ID:START` (journal/owner.py): lets a lease of a dead process be taken over at once."""
    return owner_text()


@dataclass
class Session:
    """Everything a command needs, opened once."""

    settings: Settings
    inventory: Inventory
    journal: Journal
    redactor: Redactor
    transport: httpx.AsyncBaseTransport | None = None
    clock: Clock = field(default_factory=RealClock)
    retry: RetryPolicy | None = None
    #: A long-lived notifier (orchestrate serve keeps one); None: `execute` makes one per run
    #: when ORCHESTRATOR_NOTIFY_URL is set and flushes it, bounded, when the run ends.
    notifier: Notifier | None = None
    #: runs admitted by orchestrator/service/admission.py and not yet executed: run id -> Admitted (the
    #: lease admission took is the one `execute` runs under)
    admitted: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def open(cls, settings: Settings, *, transport=None, clock: Clock | None = None, retry=None) -> "Session":
        inventory = load_inventory(settings.inventory_path())
        redactor = Redactor()
        redactor.add(*settings.tokens())
        journal = open_journal_for(settings, redactor)  # a bad location: one UserError line
        if clock is None:
            clock = clock_for(inventory.urls())
        if retry is None and isinstance(clock, ScaledClock):
            # against the simulator, a retry's deadline on the scaled clock must still leave real
            # time for a loopback round trip (60 clock-s at 3000x would be 20 ms)
            retry = RetryPolicy(deadline_s=max(60.0, 2.0 * clock.speed), busy_wait_s=5)
        return cls(settings, inventory, journal, redactor, transport, clock, retry)

    def close(self) -> None:
        self.journal.close()


def _compose_client(session: Session, entry: HostEntry) -> ComposeManagerClient:
    """A compose-manager client for commands that read the host before a run exists."""
    return ComposeManagerClient(str(entry.compose_manager_url).rstrip("/"), session.settings.compose_manager_token,
                                transport=session.transport, retry=session.retry, redactor=session.redactor,
                                clock=session.clock)


async def previous_from_action_log(session: Session, host: str, rb: Runbook) -> dict[str, dict[str, str]]:
    """With no journal: for each service, the newest successful deploy before the current one.

    Success comes from compose-manager's record (`/version` projects.<p>.current/previous, written
    only after an up succeeded); the action log says which services each up named (it logs every
    attempt, failed ones too)."""
    entry = session.inventory.host(host)
    async with _compose_client(session, entry) as cm:
        actions = await cm.action_log()
        version = await cm.version()
    proj = version.project(entry.project)
    current = {(proj.current.tag, proj.current.file)} if proj.current else set()
    earlier = {(proj.previous.tag, proj.previous.file)} if proj.previous else set()
    out: dict[str, dict[str, str]] = {}
    for service in rb.previous_refs():
        act = newest_successful(actions, service, earlier - current)
        if act is not None:
            out[service] = {"tag": act.tag or "", "file": act.file or "", "commit": act.commit or ""}
    return out


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
        if admitted is not None:  # orchestrator/service/admission.py took the lease with the run
            lease, taken = admitted.lease, admitted.took_over
        else:
            lease, taken = session.journal.acquire_lease(run.host, run.run_id, owner, session.settings.lease_ttl,
                                                         takeover_if=lambda held: holder_gone(held.owner))
    except LeaseHeld as exc:
        raise Refused(
            f"{run.host} is leased by run {exc.holder_run_id} ({describe_owner(exc.owner)}) until "
            f"{exc.expires_at:%Y-%m-%d %H:%M:%S} UTC: one rollout per host at a time; wait, or take it over once it expires"
        ) from None
    from orchestrator.journal import audit

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


def notifier_for(session: Session) -> Notifier:
    """The webhook notifier of ORCHESTRATOR_NOTIFY_URL, its messages scrubbed by the session's redactor."""
    s = session.settings
    return Notifier(s.notify_url.get_secret_value(), s.notify_format, scrub=session.redactor.scrub)


def refuse_if_leased(session: Session, host: str) -> None:
    """Refuse before a run is even created when another runner holds the host (the lease itself
    is what guarantees exclusion; this only keeps the journal free of runs that never started)."""
    lease = session.journal.current_lease(host)
    if lease is not None and not holder_gone(lease.owner):  # a dead holder's lease counts as expired
        raise Refused(
            f"{host} is leased by run {lease.run_id} ({describe_owner(lease.owner)}) until {lease.expires_at:%Y-%m-%d %H:%M:%S} UTC: "
            f"one rollout per host at a time; wait, or `orchestrate resume {lease.run_id}` once it expires"
        )


def refuse_unreadable_logs(session: Session, host: str, rb: Runbook) -> None:
    """compose-manager 8e07c35 reads `compose/logs` of project `work` whatever is sent: with a
    non-default project the log gates would read another project and wait out their timeout.
    Refuse up front, before anything is sent."""
    entry = session.inventory.host(host)
    has_log_gates = any(s.logs is not None for steps in rb.step_lists() for s in steps)
    if entry.project and has_log_gates:
        raise UserError(
            f"{host}'s inventory sets project {entry.project!r}, but compose-manager (8e07c35) reads logs of the default "
            f"project only, so the runbook's log gates could never see the engines: omit project for {host}"
        )


def new_rollout(session: Session, host: str, tag: str, runbook: str,
                start_phase: str | None = None, *, skip_tag_age_check: bool = False,
                overrides: Sequence[str] | None = None) -> tuple[RunRecord, Runbook, Table]:
    """A rollout run. `start_phase` (from `--continue`, after `place_for_continue`) starts the
    procedure part-way; preflight's host-state check confirms the host is still there.
    `overrides` (the CLI's `--override-prerequisite`, () for none): the runbook's prerequisites
    are checked at admission and the overrides journaled with the run; None leaves both to the
    run's own `check: prerequisites` gate (callers that journal overrides themselves)."""
    from orchestrator.service import admission
    check_tag(tag)
    session.inventory.host(host)
    refuse_if_leased(session, host)
    rb = load_runbook(runbook)
    if host not in rb.hosts:
        raise UserError(f"runbook {rb.name} is written for {', '.join(rb.hosts)}, not {host}: pick the host's runbook with --runbook")
    refuse_unreadable_logs(session, host, rb)
    refuse_unsettled(session, host)
    try:
        table = compile_rollout(rb, start_phase)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    ctx = RunContext.new(start_phase=start_phase, skip_tag_age_check=skip_tag_age_check,
                         extra={RUNBOOK_IDENTITY: identity_of(runbook)})
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
    checks = []
    if start_phase is not None:
        checks.append(lambda: _require_earlier_phases_passed(session, host, tag, rb, start_phase))
    after = None
    if overrides is not None:
        checks.append(admission.prerequisites_hold(session, rb, overrides))
        if overrides:
            from orchestrator.engine.fleet import journal_overrides

            after = lambda r: journal_overrides(session.journal, r, overrides, owner_id(), rb)  # noqa: E731
    got = admission.admit(session, host=host, rb=rb, checks=checks, after=after,
                          create=dict(host=host, runbook=rb.name, tag=tag, kind="rollout", state=table.start,
                                      context=ctx.to_json()))
    session.admitted[got.run.run_id] = got
    return got.run, rb, table


async def _observe(session: Session, host: str, rb: Runbook, tag: str) -> dict[str, str]:
    """What the host runs, for placement (read-only: docker/ps and one dry run)."""
    from orchestrator.hosts.clients.dashboard import DashboardClient
    from orchestrator.engine.executor.placement import PlacementError, observe_host

    entry = session.inventory.host(host)
    async with DashboardClient(str(session.inventory.dashboard_url).rstrip("/"), session.settings.dashboard_token,
                               transport=session.transport, retry=session.retry, clock=session.clock) as dash:
        env = await dash.env_map(name=entry.instance_name)
    session.redactor.add(*env.redaction_values())
    async with _compose_client(session, entry) as cm:
        try:
            return await observe_host(cm, env, rb, tag, entry.project)
        except PlacementError as exc:
            raise Refused(f"cannot place {host} in the runbook: {exc}") from None


async def place_for_continue(session: Session, host: str, tag: str, runbook: str) -> str:
    """`rollout --continue`: the phase the host's declared state continues at (read-only)."""
    from orchestrator.engine import host_state

    check_tag(tag)
    rb = load_runbook(runbook)
    observed = await _observe(session, host, rb, tag)
    state = host_state.place(rb, observed)
    if state is None:
        near = host_state.nearest(rb, observed)
        diff = f"; nearest is {near[0].name}: " + "; ".join(near[1]) if near else ""
        raise Refused(f"{host} is in a state the runbook does not recognise ({host_state.describe(observed)}){diff}. Nothing was changed")
    if state.action == "done":
        raise Refused(f"{host} already runs the target ({state.say}): nothing to continue")
    phase = rb.phases[0].name if state.action == "start" else state.action
    await _refuse_foreign_part_way(session, host, rb, tag)
    _require_earlier_phases_passed(session, host, tag, rb, phase)
    return phase


async def _refuse_foreign_part_way(session: Session, host: str, rb: Runbook, tag: str) -> None:
    """`--continue` never takes over a rollout that another journal (or a person) is driving."""
    from orchestrator.engine.foreign_check import refuse_foreign_part_way

    async with _compose_client(session, session.inventory.host(host)) as cm:
        actions = await cm.action_log()
    msg = refuse_foreign_part_way(session.journal, host, actions, rb.file, tag,
                                  session.redactor.scrub(session.settings.journal_location()))
    if msg:
        raise Refused(msg)


def _require_earlier_phases_passed(session: Session, host: str, tag: str, rb: Runbook, phase: str) -> None:
    """Containers alone do not say a phase finished: its relay checks, sidecars, verification and
    soak may not have run. Continuing at `phase` needs the journal to show the phase before it
    passed its last gate (in some run of this host at this tag)."""
    names = rb.phase_names()
    if phase not in names or names.index(phase) == 0:
        return
    before = rb.phases[names.index(phase) - 1]
    last_state = f"{before.name}.{before.steps[-1].id}"
    for run in session.journal.list_runs(host, limit=100):
        if run.kind == "rollout" and run.tag == tag and any(
                t.from_state == last_state and t.event == "ok" for t in session.journal.transitions(run.run_id)):
            return
    raise Refused(f"{host} runs the new {before.name}, but no run in this journal shows phase {before.name}'s gates passed "
                  f"(its last step, {last_state}, never succeeded): resume the run that moved it (`orchestrate runs --host {host}`), "
                  f"or check the host by hand. Nothing was changed")


def refuse_unsettled(session: Session, host: str, *, except_run: str | None = None) -> None:
    """A run of `host` that ended without knowing whether its last compose call took effect must
    be resumed first (its resume settles that call): acting around it could stop what that call
    is still starting or stopping."""
    for other in session.journal.list_runs(host, limit=50):
        if other.terminal or other.run_id == except_run:
            continue
        if session.journal.open_effects(other.run_id):
            raise Refused(f"run {other.run_id} stopped with a compose call whose outcome is unknown: "
                          f"`orchestrate resume {other.run_id}` settles it first. Nothing was changed")


def refuse_stale_resume(session: Session, run: RunRecord) -> None:
    """A run is continued only if no later run changed its host since (a newer rollout, a
    `--continue`, a rollback): its context describes a host that no longer exists."""
    for other in session.journal.list_runs(run.host, limit=50):
        if other.run_id == run.run_id or other.seq <= run.seq:  # the journal's order, never a clock
            continue
        if other.kind == "rollout" and other.parent_run_id == run.run_id:
            continue  # its own `--retry` child
        if other.kind == "rollback" or any(e.mutating for e in session.journal.effects(other.run_id)):
            raise Refused(f"run {other.run_id} ({other.kind}) started after {run.run_id} and acted on {run.host}: "
                          f"{run.run_id} describes a host that no longer exists and is not continued. "
                          f"Start a new run (`orchestrate rollout {run.host} --tag {run.tag}` places the host)")


def retry_run(session: Session, run: RunRecord) -> tuple[RunRecord, Runbook, Table]:
    """`resume --retry`: a halted rollout starts its failed phase again, as a new run."""
    if run.outcome != HALTED or run.kind != "rollout":
        raise UserError(f"run {run.run_id} is {run.outcome or run.state}: --retry is for a halted rollout")
    if session.journal.open_effects(run.run_id):
        raise Refused(f"run {run.run_id} halted with a compose call whose outcome is unknown: look at the host "
                      f"(`orchestrate status {run.run_id}`) before retrying. Nothing was changed")
    refuse_stale_resume(session, run)
    rb = load_recorded_runbook(run.runbook, run.context.get(RUNBOOK_IDENTITY))
    table = compile_rollout(rb)
    failed = (run.context.get("failure") or {}).get("state")
    if not failed or failed not in table.nodes:
        raise UserError(f"run {run.run_id} has no failed step to retry from")
    phase = table.nodes[failed].phase
    if phase is None or phase not in table.phase_starts:
        raise UserError(f"run {run.run_id} failed in {failed}, which is not a forward phase: --retry restarts a forward phase")
    start = table.retry_start(phase)
    ctx = RunContext.from_json(run.context).for_retry()
    from orchestrator.service import admission

    got = admission.admit(session, host=run.host, rb=rb, checks=[lambda: refuse_stale_resume(session, run)],
                          create=dict(host=run.host, runbook=rb.name, tag=run.tag, kind="rollout", state=start,
                                      context=ctx.to_json(), parent_run_id=run.run_id))
    session.admitted[got.run.run_id] = got
    return got.run, rb, table


def last_changing_rollout(session: Session, host: str) -> RunRecord | None:
    """The newest rollout of `host` that got past preflight with its rollback targets known: the
    run a rollback undoes. An ABORTED run (refused before any change, e.g. at a bad tag) and a run
    that found nothing to do are never it."""
    for run in session.journal.list_runs(host, limit=200):
        if run.kind != "rollout" or run.outcome == ABORTED:
            continue
        if RunContext.from_json(run.context).previous:
            return run
    return None


async def validate_rollback_targets(session: Session, host: str, rb: Runbook, previous: dict[str, dict[str, str]]) -> None:
    """Dry-run every distinct (tag, file) a rollback goes back to, before anything is stopped: a
    typo in --to-file or --to-tag exits 2 with nothing sent but dry runs."""
    from orchestrator.hosts.clients.compose_manager import ComposeRequest, validate_file
    from orchestrator.hosts.clients.dashboard import DashboardClient
    from orchestrator.hosts.clients.errors import BadRequest, RequestInvalid, TagNotFound, TagTooRecent

    entry = session.inventory.host(host)
    targets = group_targets(rb, previous)
    for (_, file), services in targets.items():
        try:
            validate_file(file)
        except RequestInvalid as exc:
            raise UserError(f"rollback target file {file!r} for {', '.join(services)}: {exc.detail}") from None
    async with DashboardClient(str(session.inventory.dashboard_url).rstrip("/"), session.settings.dashboard_token,
                               transport=session.transport, retry=session.retry, clock=session.clock) as dash:
        env = await dash.env_map(name=entry.instance_name)
    session.redactor.add(*env.redaction_values())
    from orchestrator.hosts.ps_compare import compare_ps, describe_changes, split_by_definition

    async with _compose_client(session, entry) as cm:
        actions = await cm.action_log()
        for (tag, file), all_services in targets.items():
            before = await cm.ps(entry.project)
            running = {(c.service or c.name): c for c in before if c.state in ("running", "restarting")}
            # never a dry run that plans a recreate (docker/compose#14029 performs it): what runs
            # another definition is checked by the rollback's own dry run, after its stop
            services, _held = split_by_definition(all_services, running, tag, file, actions, engines=set(rb.engines()))
            if not services:
                continue
            req = ComposeRequest(tag=tag, file=file, services=tuple(services), project=entry.project, dry_run=True)
            try:
                outcome = await cm.up(req, env)
            except (TagNotFound, TagTooRecent, BadRequest) as exc:
                raise UserError(f"rollback target {file}@{tag} is not usable: {session.redactor.scrub(str(exc))}; "
                                f"check --to-tag/--to-file. Nothing was stopped") from None
            changes = compare_ps(before, await cm.ps(entry.project))
            if changes:
                raise Refused(f"the dry run of rollback target {file}@{tag} changed real containers: {describe_changes(changes)} "
                              f"(docker/compose#14029, or someone else acting on {host}): inspect the host. Nothing more was sent")
            if outcome.status != "success":
                raise UserError(f"rollback target {file}@{tag}: its dry run failed ("
                                + session.redactor.scrub(" | ".join(outcome.lines[-2:])) + "); check --to-tag/--to-file. Nothing was stopped")


async def new_rollback(session: Session, host: str, replica: str, runbook: str | None,
                       to_tag: str | None, to_file: str | None) -> tuple[RunRecord, Runbook, Table]:
    session.inventory.host(host)
    refuse_if_leased(session, host)
    last = last_changing_rollout(session, host)
    rb = load_runbook(runbook or (last.runbook if last else _runbook_of(host)))
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
            from orchestrator.service.oncall import never_rolled_out

            raise Refused(never_rolled_out(host, session.settings.journal_location()))
        # rolled out from another journal (another machine, team mode's database): name it and the exact command
        raise Refused(incident.no_journal_message(session, host, rb, history, "no rollout of this host is journaled here"))
    missing = [s for s in rb.previous_refs() if s not in previous]
    if missing and last is None:
        await _refuse_without_journal(session, host, rb, f"cannot establish the previous tag and file of {', '.join(missing)} "
                                      f"from compose-manager (it remembers only its last two successful ups)")
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
                         extra={RUNBOOK_IDENTITY: identity_of(runbook or (last.runbook if last else rb.name))})
    if last is not None:  # a one-shot the rolled-back runs already removed is not sent a down again
        from orchestrator.engine.oneshot_ledger import removed_oneshots
        ctx.oneshots_removed = removed_oneshots(session.journal, host, last.run_id, rb.oneshot_services())
    from orchestrator.service import admission

    # the host reads above took time: what they were judged against is judged again, in the
    # transaction that creates the run and takes the leases
    got = admission.admit(session, host=host, rb=rb,
                          checks=[admission.tier_not_busy(session, host, rb),
                                  admission.same_newest_changing_rollout(session, host, last)],
                          create=dict(host=host, runbook=rb.name, tag=tag, kind="rollback", state=table.start,
                                      context=ctx.to_json(), parent_run_id=last.run_id if last else None))
    session.admitted[got.run.run_id] = got
    return got.run, rb, table


def _runbook_of(host: str) -> str:
    """No journaled rollout names the runbook: the one shipped runbook written for `host`."""
    from orchestrator.engine.fleet import default_runbook

    return default_runbook(host)


async def _refuse_without_journal(session: Session, host: str, rb: Runbook, why: str) -> None:
    """No journaled rollout and no explicit target: refused, naming the journal this machine
    reads and the exact command, with a target read from compose-manager's action log."""
    raise Refused(incident.no_journal_message(session, host, rb, await incident.host_history(session, host, rb), why))


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


def refuse_tier_busy(session: Session, host: str, rb: Runbook) -> None:
    """A host whose capacity is the fleet's (`capacity: fleet`) is not rolled back while another
    host of its runbook has a run that has not ended: that host may be out of the pool, and a
    rollback drains this one too. Finish or abort that run first."""
    from orchestrator.engine.prerequisites import unfinished

    if rb.capacity != "fleet":
        return
    for other, r in unfinished(session.journal, [h for h in rb.hosts if h != host]):
        raise Refused(f"{other} has run {r.run_id} ({r.kind}) that has not ended, at {r.state}: rolling {host} back now "
                      f"would drain a second host of the tier. Let it end (or `orchestrate abort {r.run_id}`), then roll "
                      f"{host} back. Nothing was changed")


async def tier_listing(session: Session, rb: Runbook, hosts: Sequence[str]) -> dict[str, list[str]]:
    """For each host: why the model-proxy peers do not route the runbook's base domain to it
    (empty: every peer lists it healthy). Read-only; a peer that cannot be asked is a reason
    (capacity is never assumed)."""
    from orchestrator.hosts.clients.errors import ClientError
    from orchestrator.hosts.clients.model_proxy import ModelProxyClient

    domain = rb.domains.of("base")
    out: dict[str, list[str]] = {h: [] for h in hosts}
    peers = [ModelProxyClient(name, str(url).rstrip("/"), session.settings.model_proxy_token, transport=session.transport,
                              retry=session.retry, clock=session.clock)
             for name, url in session.inventory.model_proxy_peers.items()]
    try:
        for peer in peers:
            for h in hosts:
                addr = session.inventory.host(h).model_proxy_address
                try:
                    got = await peer.presence(addr, domain)
                except ClientError as exc:
                    out[h].append(f"{peer.name} could not be asked ({type(exc).__name__})")
                    continue
                if not (got.listed and got.healthy):
                    out[h].append(f"{peer.name} does not list it healthy under {domain}")
    finally:
        for peer in peers:
            await peer.aclose()
    return out


async def refuse_tier_short(session: Session, host: str, rb: Runbook) -> None:
    """A rollback of a `capacity: fleet` host that the peers route to drains it: admitted only
    while every other host of the tier is in the pool, as the peers list it (their live pool
    listings, not the journal: a HALTED host outside the pool has no unfinished run). A host
    that is itself out of the pool only comes back: its rollback takes no capacity away."""
    if rb.capacity != "fleet":
        return
    others = [h for h in rb.hosts if h != host]
    unknown = [h for h in others if h not in session.inventory.hosts]
    if unknown:
        raise Refused(f"capacity cannot be confirmed: {', '.join(unknown)} not in the inventory; rolling {host} back "
                      f"could leave the tier short. Nothing was changed")
    listing = await tier_listing(session, rb, [host, *others])
    if listing[host] and not any("could not be asked" in why for why in listing[host]):
        return  # every peer answered and none lists it: not in the pool now, the rollback brings it back
    short = {h: why for h, why in listing.items() if h != host and why}
    if short:
        serving = len(rb.hosts) - len(short)
        raise Refused(f"rolling {host} back drains it, and the model-proxy peers route the base domain to only "
                      f"{serving} of {len(rb.hosts)} hosts of the tier now ("
                      + "; ".join(f"{h}: {', '.join(why)}" for h, why in short.items())
                      + f"): that would leave {serving - 1} serving. Bring "
                      f"{', '.join(short)} back into the pool first (`orchestrate rollback {next(iter(short))}` if "
                      f"its run ended outside it). Nothing was changed")


async def refuse_nothing_to_roll_back(session: Session, host: str, rb: Runbook, tag: str) -> None:
    """A host the runbook places in its before-state already runs the previous configuration: a
    rollback would only drain it or restart what serves. Refused, read-only."""
    from orchestrator.engine import host_state

    state = host_state.place(rb, await _observe(session, host, rb, tag))
    if state is not None and state.action == "start":
        raise Refused(f"{host} already runs the previous configuration ({state.name}: {state.say}): nothing to roll back. "
                      f"Nothing was changed")


async def refuse_alone(session: Session, host: str, rb: Runbook, replica: str, last: RunRecord | None) -> None:
    """One replica cannot go back to the previous file while an engine of another replica that
    only the new file defines runs: compose-manager's --remove-orphans would stop it."""
    entry = session.inventory.host(host)
    new_only: list[str] = []
    for ph in rb.full_rollback:
        if ph.replica == replica:
            continue
        for s in ph.steps:
            if s.down is not None and s.down.file == "new" and isinstance(s.down.services, list):
                new_only += [x for x in s.down.services if rb.replica_of(x) and rb.replica_of(x) != replica]
    prev_defined = {x for steps in rb.step_lists() for st in steps
                    if st.compose is not None and st.compose.file.startswith("previous:") and isinstance(st.compose.services, list)
                    for x in st.compose.services}
    new_only = [x for x in new_only if x not in prev_defined]
    if not new_only:
        return
    async with _compose_client(session, entry) as cm:
        running = {c.service or c.name for c in await cm.ps(entry.project) if c.state in ("running", "restarting")}
    blocking = [s for s in new_only if s in running]
    if blocking:
        retry = f"`orchestrate resume {last.run_id} --retry`" if last is not None else "`orchestrate resume RUN_ID --retry`"
        raise Refused(
            f"refusing to roll {replica} back alone: {', '.join(blocking)} runs, and the previous file does not define it, so "
            f"compose-manager's --remove-orphans would stop it with a 10 s stop while {replica} is down (no replica left). "
            f"Run `orchestrate rollback {host} --replica all` (in the runbook's safe order, one replica serving at every moment), "
            f"or retry {replica} from the new file with {retry}. Nothing was changed."
        )


__all__ = ["Session", "execute", "new_rollout", "new_rollback", "retry_run", "table_for", "check_tag", "RunnerFenced"]
