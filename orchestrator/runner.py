"""Starting, continuing and finishing runs: journal, lease, clients, per-run log file, executor.

The CLI, `orchestrate demo`, `orchestrate serve` and the end-to-end tests all go through here, so
every path runs the same code against whatever transport and clock they are given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import httpx
import structlog

from orchestrator.clients.compose_manager import ComposeManagerClient
from orchestrator.clients.retry import RetryPolicy
from orchestrator.clock import Clock, RealClock, ScaledClock
from orchestrator.executor import Executor, RunnerFenced, run_with_heartbeat
from orchestrator.host_clients import build_host_clients
from orchestrator.inventory import HostEntry, Inventory, load_inventory
from orchestrator.startup import open_journal_for
from orchestrator.journal.base import Journal, LeaseHeld, LeaseLost, RunRecord
from orchestrator.journal.owner import describe_owner, holder_gone, owner_text
from orchestrator.machine import HALTED, Table, compile_rollback, compile_rollout
from orchestrator.parsers.action_log import last_deploy
from orchestrator.progress import NullProgress, Progress
from orchestrator.redaction import Redactor
from orchestrator.run_logs import ROUTER, open_run_log
from orchestrator.runbook import Runbook, load_runbook
from orchestrator.settings import Settings
from orchestrator.user_errors import Refused, UserError

TAG_RE = re.compile(r"^v\d+\.\d+\.\d+$")


def check_tag(tag: str) -> str:
    if not TAG_RE.match(tag):
        raise UserError(f"tag {tag!r} is malformed: tags look like v0.0.N (e.g. v0.0.300)")
    return tag


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

    @classmethod
    def open(cls, settings: Settings, *, transport=None, clock: Clock | None = None, retry=None) -> "Session":
        inventory = load_inventory(settings.inventory_path())
        redactor = Redactor()
        redactor.add(*settings.tokens())
        journal = open_journal_for(settings, redactor)  # a bad location: one UserError line
        if clock is None:
            clock = ScaledClock(settings.time_scale) if settings.time_scale != 1.0 else RealClock()
        return cls(settings, inventory, journal, redactor, transport, clock, retry)

    def close(self) -> None:
        self.journal.close()


def _compose_client(session: Session, entry: HostEntry) -> ComposeManagerClient:
    """A compose-manager client for commands that read the host before a run exists."""
    return ComposeManagerClient(str(entry.compose_manager_url).rstrip("/"), session.settings.compose_manager_token,
                                transport=session.transport, retry=session.retry, redactor=session.redactor,
                                clock=session.clock)


async def previous_from_action_log(session: Session, host: str, rb: Runbook) -> dict[str, dict[str, str]]:
    """With no journal: the deploy before the current one of each service, from the action log."""
    entry = session.inventory.host(host)
    async with _compose_client(session, entry) as cm:
        actions = await cm.action_log()
    out: dict[str, dict[str, str]] = {}
    for service in rb.previous_refs():
        current = last_deploy(actions, service)
        if current is None:
            continue
        idx = actions.index(current)
        earlier = [a for a in actions[:idx] if (a.tag, a.file) != (current.tag, current.file)]
        prev = last_deploy(earlier, service)
        if prev is not None:
            out[service] = {"tag": prev.tag, "file": prev.file, "commit": prev.commit or ""}
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
    is how Ctrl-C stops a run (cli.py): the executor's journal writes are synchronous, so a
    cancellation lands at an await between two writes; the journal already says where the run
    is, and `orchestrate resume` continues from there. A lease whose holder process is gone
    (same machine, journal/owner.py) is taken over at once instead of waiting for its TTL.
    """
    entry = session.inventory.host(run.host)
    owner = owner_id()
    try:
        lease, taken = session.journal.acquire_lease(run.host, run.run_id, owner, session.settings.lease_ttl,
                                                     takeover_if=lambda held: holder_gone(held.owner))
    except LeaseHeld as exc:
        raise Refused(
            f"{run.host} is leased by run {exc.holder_run_id} ({describe_owner(exc.owner)}) until "
            f"{exc.expires_at:%Y-%m-%d %H:%M:%S} UTC: one rollout per host at a time; wait, or take it over once it expires"
        ) from None
    progress = progress or NullProgress()
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


def table_for(run: RunRecord, rb: Runbook) -> Table:
    if run.kind == "rollback":
        return compile_rollback(rb, run.context.get("replicas", ["r2", "r1"]))
    return compile_rollout(rb)


def refuse_if_leased(session: Session, host: str) -> None:
    """Refuse before a run is even created when another runner holds the host (the lease itself
    is what guarantees exclusion; this only keeps the journal free of runs that never started)."""
    lease = session.journal.current_lease(host)
    if lease is not None and not holder_gone(lease.owner):  # a dead holder's lease counts as expired
        raise Refused(
            f"{host} is leased by run {lease.run_id} ({describe_owner(lease.owner)}) until {lease.expires_at:%Y-%m-%d %H:%M:%S} UTC: "
            f"one rollout per host at a time; wait, or `orchestrate resume {lease.run_id}` once it expires"
        )


def new_rollout(session: Session, host: str, tag: str, runbook: str) -> tuple[RunRecord, Runbook, Table]:
    check_tag(tag)
    session.inventory.host(host)
    refuse_if_leased(session, host)
    rb = load_runbook(runbook)
    if host not in rb.hosts:
        raise UserError(f"runbook {rb.name} is written for {', '.join(rb.hosts)}, not {host}: pick the host's runbook with --runbook")
    table = compile_rollout(rb)
    run = session.journal.create_run(host=host, runbook=rb.name, tag=tag, kind="rollout", state=table.start,
                                     context={"previous": {}, "plans": {}, "retries": {}})
    return run, rb, table


def retry_run(session: Session, run: RunRecord) -> tuple[RunRecord, Runbook, Table]:
    """`resume --retry`: a halted rollout starts its failed phase again, as a new run."""
    if run.outcome != HALTED or run.kind != "rollout":
        raise UserError(f"run {run.run_id} is {run.outcome or run.state}: --retry is for a halted rollout")
    rb = load_runbook(run.runbook)
    table = compile_rollout(rb)
    failed = (run.context.get("failure") or {}).get("state")
    if not failed or failed not in table.nodes:
        raise UserError(f"run {run.run_id} has no failed step to retry from")
    phase = table.nodes[failed].phase
    start = next(s for s in table.order if table.nodes[s].phase == phase and table.nodes[s].section == "forward")
    ctx = {k: v for k, v in run.context.items() if k in ("previous", "budget", "before", "deployed")}
    ctx |= {"plans": {}, "retries": {}}
    child = session.journal.create_run(host=run.host, runbook=rb.name, tag=run.tag, kind="rollout", state=start,
                                       context=ctx, parent_run_id=run.run_id)
    return child, rb, table


async def new_rollback(session: Session, host: str, replica: str, runbook: str | None,
                       to_tag: str | None, to_file: str | None) -> tuple[RunRecord, Runbook, Table]:
    session.inventory.host(host)
    refuse_if_leased(session, host)
    last = session.journal.latest_run(host, kind="rollout")
    rb = load_runbook(runbook or (last.runbook if last else "gpu02-glm53-w4afp8-long-context"))
    replicas = ["r2", "r1"] if replica == "all" else [replica]
    if (to_tag is None) != (to_file is None):
        raise UserError("--to-tag and --to-file go together")
    if to_tag is not None:
        check_tag(to_tag)
        previous = {svc: {"tag": to_tag, "file": to_file or "", "commit": ""} for svc in rb.previous_refs()}
        source = "--to-tag/--to-file"
    elif last is not None and last.context.get("previous"):
        previous = dict(last.context["previous"])
        source = f"run {last.run_id}"
    else:
        previous = await previous_from_action_log(session, host, rb)
        source = "the action log"
    missing = [s for s in rb.previous_refs() if s not in previous]
    if missing:
        raise Refused(f"cannot establish the previous tag and file of {', '.join(missing)} from {source}: pass --to-tag and --to-file")
    if replica == "r1":
        await refuse_r1_alone(session, host, rb)
    table = compile_rollback(rb, replicas)
    tag = last.tag if last is not None else None
    if tag is None:
        raise UserError(
            f"no rollout of {host} is journaled in {session.settings.journal_location()}, so the new file's tag is unknown: "
            f"run this where the rollout's journal is (ORCHESTRATOR_STATE_DIR / ORCHESTRATOR_DATABASE_URL)"
        )
    run = session.journal.create_run(
        host=host, runbook=rb.name, tag=tag, kind="rollback", state=table.start,
        context={"previous": previous, "plans": {}, "retries": {}, "replicas": replicas, "previous_source": source},
        parent_run_id=last.run_id if last else None,
    )
    return run, rb, table


async def refuse_r1_alone(session: Session, host: str, rb: Runbook) -> None:
    """r1 cannot go back to the previous file while a service it does not define (the new r2) runs."""
    entry = session.inventory.host(host)
    r2_new = []
    for ph in rb.full_rollback:
        if ph.replica == "r2":
            for s in ph.steps:
                if s.down is not None and s.down.file == "new" and isinstance(s.down.services, list):
                    r2_new += [x for x in s.down.services if x.startswith("model-")]
    async with _compose_client(session, entry) as cm:
        running = {c.service or c.name for c in await cm.ps(entry.project) if c.state in ("running", "restarting")}
    blocking = [s for s in r2_new if s in running]
    if blocking:
        raise Refused(
            f"refusing to roll r1 back alone: {', '.join(blocking)} runs, and the previous file does not define it, so "
            f"compose-manager's --remove-orphans would stop it with a 10 s stop while r1 is down (no replica left). "
            f"Run `orchestrate rollback {host} --replica all` (r2 first, one replica serving at every moment), "
            f"or retry r1 from the new file with `orchestrate resume RUN_ID --retry`. Nothing was changed."
        )


def context_summary(run: RunRecord) -> dict[str, Any]:
    return {
        "run_id": run.run_id, "host": run.host, "kind": run.kind, "tag": run.tag, "runbook": run.runbook,
        "state": run.state, "outcome": run.outcome, "message": run.message,
        "created_at": run.created_at.isoformat(), "updated_at": run.updated_at.isoformat(),
        "parent_run_id": run.parent_run_id,
    }


__all__ = ["Session", "execute", "new_rollout", "new_rollback", "retry_run", "table_for", "check_tag", "RunnerFenced"]
