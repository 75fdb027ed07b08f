"""What the CLI and `orchestrate serve` both do for an operator (written once so they cannot
drift): approve, abort, pause and continue (journal signals, refused on a finished run), the
lease-refused text and the soak parser. An approval names `*` or one of the run's approval gates:
a typo must never be journaled as an approval that nothing reads."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.engine.rules.approval_scope import stored_name, waiting_gate
from orchestrator.journal import audit
from orchestrator.journal.owner import describe_owner, holder_gone
from orchestrator.service.run_info import table_for
from orchestrator.util.durations import parse_duration
from orchestrator.util.user_errors import UserError

if TYPE_CHECKING:
    from orchestrator.journal.base import RunRecord
    from orchestrator.journal.sql import Journal
    from orchestrator.language.machine import Table
    from orchestrator.language.runbook import Runbook

#: The longest gate name accepted (node ids are far shorter).
MAX_GATE_LEN = 200


def parse_soak(value: str | float | None, what: str = "--soak") -> float | None:
    """Seconds of a soak override (`30m`, `0`, `90`), or None; a UserError names `what`."""
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise UserError(f"{what}: {exc}") from None


def table_gates(table: Table) -> set[str]:
    """The steps that wait for a human's approval: a quiet window, a soak that asks for one, a
    `manual:` step. The run page asks this too: its Approve button is live exactly where accepted."""
    return {node_id for node_id, node in table.nodes.items() if (step := node.step) is not None and (
        step.kind == "quiet" or step.manual is not None or (step.kind == "soak" and step.soak and step.soak.approval))}


def run_gates(run: RunRecord, load: Callable[[], Runbook]) -> set[str]:
    """`*` and the `table_gates` of the run in `load()`; only `*` where the runbook cannot be loaded
    (approving still works)."""
    try:
        return {"*"} | table_gates(table_for(run, load()))
    except UserError:
        return {"*"}


def _refuse_if_finished(run: RunRecord) -> None:
    if run.terminal:
        raise UserError(f"run {run.run_id} already ended {run.outcome}")


def approve(journal: Journal, run: RunRecord, gate: str | None, by: str, gates: Collection[str] | None = None,
            *, now: bool = False) -> str:
    """Journal an approval of `gate` (None: the one the run waits at) and return the line to show.
    `gates`: the accepted names. `now` also ends the rest of that soak (journaled `<gate>!now`)."""
    _refuse_if_finished(run)
    gate = waiting_gate(run, gates) if gate is None else str(gate)  # no gate given: the one it waits at
    if not gate or len(gate) > MAX_GATE_LEN:
        raise UserError(f"gate must be 1 to {MAX_GATE_LEN} characters")
    if gates is not None and gate not in gates:
        raise UserError(f"gate {gate[:60]!r} is not an approval gate of run {run.run_id}: one of {', '.join(sorted(gates))}")
    stored = stored_name(journal, run.run_id, gate)  # a `*` again: a fresh row (approval_scope.py)
    journal.approve(run.run_id, stored, by=by)
    if now:
        journal.approve(run.run_id, f"{stored}!now", by=by)
        return f"approved {gate} of {run.run_id} and ended the rest of its soak"
    return f"approved {gate} of {run.run_id}"


@dataclass(frozen=True)
class AbortResult:
    #: The owner of the lease that runs it now, or None (then the next `resume` performs the rollback).
    runner: str | None
    message: str


def abort(journal: Journal, run: RunRecord, by: str) -> AbortResult:
    """Journal an abort request for `run` and say who will act on it."""
    _refuse_if_finished(run)
    journal.request_abort(run.run_id, by=by)
    lease = journal.current_lease(run.host)
    if lease is None or lease.run_id != run.run_id or holder_gone(lease.owner):
        return AbortResult(None, f"abort recorded for {run.run_id}; no runner holds it: "
                                 f"`orchestrate resume {run.run_id}` performs the rollback")
    return AbortResult(lease.owner, f"abort recorded for {run.run_id}; its runner ({describe_owner(lease.owner)}) "
                                    f"takes the rollback at its next check")


def pause(journal: Journal, run: RunRecord, by: str) -> str:
    """Journal a pause request: the runner stops before its next safe step (executor/pause.py)."""
    _refuse_if_finished(run)
    held = journal.paused(run.run_id)
    if held is not None:
        raise UserError(f"run {run.run_id} is already paused (by {held.by} at {audit.when(held.at)}): "
                        f"`orchestrate continue {run.run_id}` goes on")
    journal.record_audit(run.run_id, "paused", by)
    return (f"pause recorded for {run.run_id}: its runner stops before its next safe step (never between a "
            f"down and its replacement's readiness); `orchestrate continue {run.run_id}` goes on")


def continue_run(journal: Journal, run: RunRecord, by: str) -> str:
    _refuse_if_finished(run)
    if journal.paused(run.run_id) is None:
        raise UserError(f"run {run.run_id} is not paused")
    journal.record_audit(run.run_id, "continued", by)
    return f"continue recorded for {run.run_id}: its runner goes on at its next check"
