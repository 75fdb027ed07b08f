"""The journal's runs: creating one (its id and its place in the global sequence) and reading runs,
their transitions and their effects back. No lease is needed for any of it."""

from __future__ import annotations

from typing import Any

from orchestrator.journal.base import (
    RUN_KINDS,
    EffectRecord,
    JournalError,
    RunRecord,
    TransitionRecord,
    _RUN_ID_RE,
    make_run_id,
)
from orchestrator.journal.sql_core import (
    _EFFECT_COLS,
    _RUN_COLS,
    _TRANSITION_COLS,
    SqlCore,
    _require_text,
)


class SqlRuns(SqlCore):
    """Run creation and the reads of runs, transitions and effects."""

    def create_run(
        self,
        *,
        host: str,
        runbook: str,
        tag: str | None,
        kind: str,
        state: str,
        context: dict,
        parent_run_id: str | None = None,
        run_id: str | None = None,
    ) -> RunRecord:
        _require_text(host, "host")
        _require_text(runbook, "runbook")
        _require_text(state, "state")
        if kind not in RUN_KINDS:
            raise JournalError(f"run kind must be one of {sorted(RUN_KINDS)}, not {kind!r}")
        if run_id is not None and not _RUN_ID_RE.match(run_id):
            raise JournalError(f"invalid run id {run_id!r}: letters, digits, '.', '_', '-' only")
        ctx = self._prepare({} if context is None else context, "context")
        with self._tx(write=True) as tx:
            now = self._now(tx)
            if parent_run_id is not None:
                self._run_exists(tx, parent_run_id)
            if run_id is None:
                for _ in range(32):
                    candidate = make_run_id(host, now)
                    if tx.one("SELECT 1 AS x FROM runs WHERE run_id = ?", candidate) is None:
                        run_id = candidate
                        break
                else:  # pragma: no cover - 32 collisions of 16 random bits in one minute
                    raise JournalError(f"could not allocate a run id for host {host}")
            elif tx.one("SELECT 1 AS x FROM runs WHERE run_id = ?", run_id) is not None:
                raise JournalError(f"run {run_id} already exists")
            self._serialize_admissions(tx)  # the sequence below is taken one creator at a time
            seq = int(tx.one("SELECT COALESCE(MAX(run_seq), 0) + 1 AS n FROM runs")["n"])  # type: ignore[index]
            tx.run(
                f"INSERT INTO runs ({_RUN_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                run_id, host, runbook, tag, kind, state, False, None, None,
                self._json_param(ctx), self._ts_param(now), self._ts_param(now), parent_run_id, seq,
            )
        return RunRecord(
            run_id=run_id, host=host, runbook=runbook, tag=tag, kind=kind, state=state,
            terminal=False, outcome=None, message=None, context=ctx, created_at=now,
            updated_at=now, parent_run_id=parent_run_id, seq=seq,
        )

    def get_run(self, run_id: str) -> RunRecord:
        with self._tx(write=False) as tx:
            return self._load_run(tx, run_id)

    def list_runs(self, host: str | None = None, limit: int = 50) -> list[RunRecord]:
        where, params = ("WHERE host = ? ", (host,)) if host is not None else ("", ())
        with self._tx(write=False) as tx:
            rows = tx.all(
                f"SELECT {_RUN_COLS} FROM runs {where}"
                "ORDER BY run_seq DESC LIMIT ?",
                *params, int(limit),
            )
        return [self._run(r) for r in rows]

    def run_census(self) -> tuple[dict[str, int], list[tuple[str, str]]]:
        """(finished runs counted by outcome, [(run_id, host)] of unfinished runs).

        What `orchestrate serve`'s /metrics needs, in two indexed-size queries that never read a
        run's context (reading every run in full made each scrape cost seconds on a big journal).
        """
        with self._tx(write=False) as tx:
            done = tx.all("SELECT outcome, COUNT(*) AS n FROM runs WHERE terminal = ? GROUP BY outcome", True)
            unfinished = tx.all("SELECT run_id, host FROM runs WHERE terminal = ?", False)
        return ({str(r["outcome"] or "HALTED"): int(r["n"]) for r in done},
                [(r["run_id"], r["host"]) for r in unfinished])

    def latest_run(self, host: str, kind: str | None = None) -> RunRecord | None:
        sql = f"SELECT {_RUN_COLS} FROM runs WHERE host = ?"
        params: tuple[Any, ...] = (host,)
        if kind is not None:
            sql += " AND kind = ?"
            params += (kind,)
        with self._tx(write=False) as tx:
            row = tx.one(sql + " ORDER BY run_seq DESC LIMIT 1", *params)
        return self._run(row) if row else None

    def transitions(self, run_id: str) -> list[TransitionRecord]:
        with self._tx(write=False) as tx:
            self._run_exists(tx, run_id)
            rows = tx.all(
                f"SELECT {_TRANSITION_COLS} FROM transitions WHERE run_id = ? ORDER BY seq",
                run_id,
            )
        return [self._transition(r) for r in rows]

    def effects(self, run_id: str) -> list[EffectRecord]:
        return self._effects(run_id, open_only=False)

    def open_effects(self, run_id: str) -> list[EffectRecord]:
        return self._effects(run_id, open_only=True)

    def _effects(self, run_id: str, *, open_only: bool) -> list[EffectRecord]:
        extra = " AND outcome_at IS NULL" if open_only else ""
        with self._tx(write=False) as tx:
            self._run_exists(tx, run_id)
            rows = tx.all(
                f"SELECT {_EFFECT_COLS} FROM effects WHERE run_id = ?{extra} ORDER BY effect_id",
                run_id,
            )
        return [self._effect(r) for r in rows]
