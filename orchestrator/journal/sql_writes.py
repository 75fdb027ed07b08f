"""A run's journaled progress: its transitions, its effects' intents and outcomes, its context.

Every write here but one is fenced (journal/sql.py's docstring): it locks the host's lease row in
its own transaction and refuses unless the caller's lease token is still current. The exception,
`end_without_runner`, ends an orphan run and judges the host's lease itself instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from orchestrator.journal.base import (
    OUTCOMES,
    EffectRecord,
    JournalError,
    Lease,
    LeaseHeld,
    StateConflict,
    TransitionRecord,
)
from orchestrator.journal.sql_core import _EFFECT_COLS, SqlCore, _require_text


class SqlWrites(SqlCore):
    """The writes that move a run: fenced by the runner's lease (or, to end an orphan, judged on it)."""

    def record_transition(
        self,
        lease: Lease,
        run_id: str,
        from_state: str,
        event: str,
        to_state: str,
        *,
        context: dict | None = None,
        terminal: bool = False,
        outcome: str | None = None,
        message: str | None = None,
        note: str | None = None,
    ) -> TransitionRecord:
        _require_text(from_state, "from_state")
        _require_text(event, "event")
        _require_text(to_state, "to_state")
        if outcome is not None and outcome not in OUTCOMES:
            raise JournalError(f"outcome must be one of {sorted(OUTCOMES)}, not {outcome!r}")
        if terminal and outcome is None:
            raise JournalError("a terminal transition needs an outcome")
        if outcome is not None and not terminal:
            raise JournalError("an outcome is only recorded with a terminal transition")
        ctx = self._prepare(context, "context") if context is not None else None
        with self._tx(write=True) as tx:
            now = self._now(tx)
            run = self._fenced_run(tx, lease, run_id)
            if run.terminal:
                raise StateConflict(
                    f"run {run_id} already finished ({run.outcome}, state {run.state}); "
                    f"refusing {event}"
                )
            if run.state != from_state:
                raise StateConflict(
                    f"run {run_id} is in state {run.state}, not {from_state}; refusing {event} "
                    f"-> {to_state}"
                )
            seq = int(
                tx.one(
                    "SELECT COALESCE(MAX(seq), 0) + 1 AS seq FROM transitions WHERE run_id = ?",
                    run_id,
                )["seq"]  # type: ignore[index]
            )
            tx.run(
                "INSERT INTO transitions (run_id, seq, from_state, event, to_state, at, note, "
                "lease_token) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                run_id, seq, from_state, event, to_state, self._ts_param(now), note, lease.token,
            )
            tx.run(
                "UPDATE runs SET state = ?, terminal = ?, outcome = ?, message = ?, context = ?, "
                "updated_at = ? WHERE run_id = ?",
                to_state, bool(terminal), outcome if terminal else run.outcome,
                message if message is not None else run.message,
                self._json_param(ctx if ctx is not None else run.context),
                self._ts_param(now), run_id,
            )
        return TransitionRecord(run_id, seq, from_state, event, to_state, now, note)

    def record_intent(
        self, lease: Lease, run_id: str, step: str, kind: str, request: dict, *, mutating: bool
    ) -> EffectRecord:
        _require_text(step, "step")
        _require_text(kind, "effect kind")
        req = self._prepare(request, "request")
        with self._tx(write=True) as tx:
            now = self._now(tx)
            run = self._fenced_run(tx, lease, run_id)
            if run.terminal:
                raise StateConflict(
                    f"run {run_id} already finished ({run.outcome}); refusing a new effect {step}"
                )
            effect_id = int(
                tx.one(
                    "SELECT COALESCE(MAX(effect_id), 0) + 1 AS n FROM effects WHERE run_id = ?",
                    run_id,
                )["n"]  # type: ignore[index]
            )
            tx.run(
                "INSERT INTO effects (run_id, effect_id, step, kind, mutating, request, intent_at, "
                "outcome, outcome_at, intent_token) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                run_id, effect_id, step, kind, bool(mutating), self._json_param(req),
                self._ts_param(now), self._json_param(None), None, lease.token,
            )
        return EffectRecord(run_id, effect_id, step, kind, bool(mutating), req, now, None, None)

    def record_outcome(
        self, lease: Lease, run_id: str, effect_id: int, outcome: dict
    ) -> EffectRecord:
        out = self._prepare(outcome, "outcome")
        with self._tx(write=True) as tx:
            now = self._now(tx)
            self._fenced_run(tx, lease, run_id)
            row = tx.one(
                f"SELECT {_EFFECT_COLS} FROM effects WHERE run_id = ? AND effect_id = ?"
                f"{self.lock_update}",
                run_id, int(effect_id),
            )
            if row is None:
                raise JournalError(f"run {run_id} has no effect {effect_id}")
            if row["outcome_at"] is not None:
                raise JournalError(f"effect {effect_id} of run {run_id} already has an outcome")
            tx.run(
                "UPDATE effects SET outcome = ?, outcome_at = ?, outcome_token = ? "
                "WHERE run_id = ? AND effect_id = ?",
                self._json_param(out), self._ts_param(now), lease.token, run_id, int(effect_id),
            )
        return replace(self._effect(row), outcome=out, outcome_at=now)

    def update_context(self, lease: Lease, run_id: str, context: dict) -> None:
        ctx = self._prepare(context, "context")
        with self._tx(write=True) as tx:
            now = self._now(tx)
            self._fenced_run(tx, lease, run_id)
            tx.run(
                "UPDATE runs SET context = ?, updated_at = ? WHERE run_id = ?",
                self._json_param(ctx), self._ts_param(now), run_id,
            )

    def end_without_runner(self, run_id: str, from_state: str, outcome: str, message: str, *, note: str | None = None,
                           takeover_if: Callable[[Lease], bool] | None = None) -> TransitionRecord:
        """End a run that no runner drives (`orchestrate abort` of an orphan): its terminal
        transition, written only if the run is still at `from_state` and no live runner holds its
        host's lease for it (LeaseHeld otherwise; `takeover_if(holder)` says a holder is gone).
        Not fenced by a token of its own: the lease row is locked and judged in this transaction,
        and a runner that took the lease before it finds the run terminal (StateConflict)."""
        _require_text(from_state, "from_state")
        if outcome not in OUTCOMES:
            raise JournalError(f"outcome must be one of {sorted(OUTCOMES)}, not {outcome!r}")
        with self._tx(write=True) as tx:
            now = self._now(tx)
            run = self._load_run(tx, run_id, lock=False)
            row = self._lease_row(tx, run.host, self.lock_update)
            if row is not None and row["released_at"] is None and row["run_id"] == run_id:
                held = self._lease(row)
                if held.expires_at > now and not (takeover_if is not None and takeover_if(held)):
                    raise LeaseHeld(held)
            run = self._load_run(tx, run_id, lock=True)
            if run.terminal or run.state != from_state:
                raise StateConflict(f"run {run_id} is {run.outcome or run.state} now, not at {from_state}")
            seq = int(tx.one("SELECT COALESCE(MAX(seq), 0) + 1 AS seq FROM transitions WHERE run_id = ?",
                             run_id)["seq"])  # type: ignore[index]
            token = int(row["token"]) if row is not None else 0
            tx.run(
                "INSERT INTO transitions (run_id, seq, from_state, event, to_state, at, note, "
                "lease_token) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                run_id, seq, from_state, "abort", outcome, self._ts_param(now), note, token,
            )
            tx.run(
                "UPDATE runs SET state = ?, terminal = ?, outcome = ?, message = ?, updated_at = ? WHERE run_id = ?",
                outcome, True, outcome, message, self._ts_param(now), run_id,
            )
            if row is not None and row["released_at"] is None and row["run_id"] == run_id:
                # the orphan's own lease (expired, or its holder gone) ends with it
                tx.run("UPDATE leases SET released_at = ? WHERE host = ? AND token = ?",
                       self._ts_param(now), run.host, int(row["token"]))
        return TransitionRecord(run_id, seq, from_state, "abort", outcome, now, note)
