"""The refusals that read only the journal and the inventory. The admission transaction
(service/admission.py) evaluates them again where it acts, so they sit below it and the runner.
A host of a `capacity: fleet` tier is not rolled back while another host of its runbook has an
unfinished run (`refuse_tier_busy`; the peers' side is host_reads.refuse_tier_short)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import TYPE_CHECKING

from orchestrator.engine.executor import RunContext
from orchestrator.engine.rules.prerequisites import unfinished
from orchestrator.hosts.inventory import HostEntry
from orchestrator.journal.base import RunRecord
from orchestrator.journal.owner import describe_owner, holder_gone
from orchestrator.language.machine import ABORTED
from orchestrator.language.runbook import Runbook
from orchestrator.util.user_errors import Refused, UserError

if TYPE_CHECKING:  # pragma: no cover
    from orchestrator.service.session import Session


def leased_refusal(host: str, holder_run_id: str, owner: str, expires_at: datetime, what: str) -> str:
    """Why a host another runner holds is refused, and what works next (a live runner renews its
    lease: resume it only if its runner died)."""
    return (f"{host} is leased by run {holder_run_id} ({describe_owner(owner)}) until "
            f"{expires_at:%Y-%m-%d %H:%M:%S} UTC: one run per host at a time; {what}. That runner renews its lease "
            f"while it runs: follow it with `orchestrate status {holder_run_id}`, stop it with `orchestrate abort "
            f"{holder_run_id}`; only if its process died, `orchestrate resume {holder_run_id}` once the lease expires")


def refuse_if_leased(session: Session, host: str, what: str = "nothing was started") -> None:
    """Refuse before a run is created when another runner holds the host: the lease guarantees
    exclusion, this keeps the journal free of runs that never started."""
    lease = session.journal.current_lease(host)
    if lease is not None and not holder_gone(lease.owner):  # a dead holder's lease counts as expired
        raise Refused(leased_refusal(host, lease.run_id, lease.owner, lease.expires_at, what))


def refuse_unreadable_logs(session: Session, host: str, rb: Runbook) -> None:
    """compose-manager 8e07c35 reads the logs of project `work` whatever is sent: with another
    project the log gates would wait out their timeout. Refused before anything is sent."""
    entry = session.inventory.host(host)
    has_log_gates = any(s.logs is not None for steps in rb.step_lists() for s in steps)
    if entry.project and has_log_gates:
        raise UserError(
            f"{host}'s inventory sets project {entry.project!r}, but compose-manager (8e07c35) reads logs of the default "
            f"project only, so the runbook's log gates could never see the engines: omit project for {host}"
        )


def refuse_missing_sources(entry: HostEntry, host: str, rb: Runbook, inventory_hosts: Collection[str]) -> None:
    """What the runbook needs of the inventory (`Runbook.inventory_problem`) would only fail
    half-way through the run: refused before it starts."""
    problem = rb.inventory_problem(host, inventory_hosts, entry.prometheus_url is not None)
    if problem is not None:
        raise UserError(problem)


def refuse_unsettled(session: Session, host: str, *, except_run: str | None = None) -> None:
    """A run of `host` that stopped not knowing whether its last compose call took effect is
    resumed first (that settles the call): acting around it could stop what the call starts."""
    for other in session.journal.list_runs(host, limit=50):
        if other.terminal or other.run_id == except_run:
            continue
        if session.journal.open_effects(other.run_id):
            raise Refused(f"run {other.run_id} stopped with a compose call whose outcome is unknown: "
                          f"`orchestrate resume {other.run_id}` settles it first. Nothing was changed")


def refuse_stale_resume(session: Session, run: RunRecord) -> None:
    """A run is continued only if no later run changed its host since: else its context describes
    a host that no longer exists."""
    for other in session.journal.list_runs(run.host, limit=50):
        if other.run_id == run.run_id or other.seq <= run.seq:  # the journal's order, never a clock
            continue
        if other.kind == "rollout" and other.parent_run_id == run.run_id:
            continue  # its own `--retry` child
        if other.kind == "rollback" or any(e.mutating for e in session.journal.effects(other.run_id)):
            raise Refused(f"run {other.run_id} ({other.kind}) started after {run.run_id} and acted on {run.host}: "
                          f"{run.run_id} describes a host that no longer exists and is not continued. "
                          f"Start a new run (`orchestrate rollout {run.host} --tag {run.tag}` places the host)")


def _require_earlier_phases_passed(session: Session, host: str, tag: str, rb: Runbook, phase: str) -> None:
    """Containers alone do not say a phase finished (its checks and soak may not have run):
    continuing at `phase` needs a run of this host and tag to show the phase before passed its last gate."""
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


def last_changing_rollout(session: Session, host: str) -> RunRecord | None:
    """The run a rollback undoes: the newest rollout of `host` that journaled its rollback targets
    and did not end ABORTED (refused before any change)."""
    for run in session.journal.list_runs(host, limit=200):
        if run.kind != "rollout" or run.outcome == ABORTED:
            continue
        if RunContext.from_json(run.context).previous:
            return run
    return None


def refuse_tier_busy(session: Session, host: str, rb: Runbook) -> None:
    """That other host may be out of the pool, and a rollback drains this one too."""
    if rb.capacity != "fleet":
        return
    for other, r in unfinished(session.journal, [h for h in rb.hosts if h != host]):
        raise Refused(f"{other} has run {r.run_id} ({r.kind}) that has not ended, at {r.state}: rolling {host} back now "
                      f"would drain a second host of the tier. Let it end (or `orchestrate abort {r.run_id}`), then roll "
                      f"{host} back. Nothing was changed")
