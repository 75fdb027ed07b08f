"""The core of the SQL journal: one transaction (`Tx`, `?` placeholders), the dialect hooks the
SQLite and PostgreSQL backends supply, row conversion, and the checks every operation shares
(`_load_run`, `_fenced_run`: a fenced write's lease check). The operations themselves live in the
sibling mixins; `orchestrator.journal.sql.SqlJournal` composes them.
"""

from __future__ import annotations

import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

from orchestrator.journal.base import (
    EffectRecord,
    Fenced,
    JournalError,
    Lease,
    Now,
    Redactor,
    RunNotFound,
    RunRecord,
    TransitionRecord,
    _superseded_text,
    _utc,
)


def _require_text(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise JournalError(f"{what} must be a non-empty string")
    return value


def _require_ttl(ttl_s: float) -> timedelta:
    if not isinstance(ttl_s, (int, float)) or not ttl_s > 0:
        raise JournalError("lease ttl_s must be a positive number of seconds")
    return timedelta(seconds=float(ttl_s))


# --------------------------------------------------------------------------- SQL logic


class Tx:
    """One open transaction: `?` placeholders, rows as dicts."""

    def __init__(self, cursor: Any, *, placeholder: str) -> None:
        self._cur = cursor
        self._placeholder = placeholder

    def _sql(self, sql: str) -> str:
        return sql if self._placeholder == "?" else sql.replace("?", self._placeholder)

    def run(self, sql: str, *params: Any) -> int:
        self._cur.execute(self._sql(sql), params)
        return self._cur.rowcount

    def all(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        self._cur.execute(self._sql(sql), params)
        return [dict(row) for row in self._cur.fetchall()]

    def one(self, sql: str, *params: Any) -> dict[str, Any] | None:
        rows = self.all(sql, *params)
        return rows[0] if rows else None


_RUN_COLS = (
    "run_id, host, runbook, tag, kind, state, terminal, outcome, message, context, "
    "created_at, updated_at, parent_run_id, run_seq"
)
_EFFECT_COLS = (
    "run_id, effect_id, step, kind, mutating, request, intent_at, outcome, outcome_at"
)
_TRANSITION_COLS = "run_id, seq, from_state, event, to_state, at, note"
_LEASE_COLS = "host, token, run_id, owner, expires_at, released_at"


class SqlCore(ABC):
    """The journal over a DB-API connection, without its operations: the dialect hooks a backend
    supplies, the transaction plumbing, row conversion and the checks every operation shares.
    The operations are mixins on top of it (sql_runs, sql_writes, sql_leases, sql_signals),
    composed into `SqlJournal` (journal/sql.py)."""

    dialect: str
    #: appended to SELECTs that lock rows (empty on SQLite, where BEGIN IMMEDIATE locks the file)
    lock_update: str = ""
    lock_share: str = ""

    def __init__(self, *, now: Now | None = None, redactor: Redactor | None = None) -> None:
        self._now_fn = now
        self._redactor = redactor
        self._lock = threading.RLock()
        self._closed = False
        self.applied_migrations: list[int] = []
        #: the transaction `atomic()` opened (its thread holds `_lock`): every call joins it
        self._open_tx: Tx | None = None

    # ---- dialect hooks

    @abstractmethod
    @contextmanager
    def _transaction(self, write: bool) -> Iterator[Tx]: ...

    @abstractmethod
    def _close_connection(self) -> None: ...

    @abstractmethod
    def _ts_param(self, dt: datetime) -> Any: ...

    @abstractmethod
    def _ts_value(self, raw: Any) -> datetime: ...

    @abstractmethod
    def _json_param(self, obj: dict | None) -> Any: ...

    @abstractmethod
    def _json_value(self, raw: Any) -> dict | None: ...

    def _db_now(self, tx: Tx) -> datetime:
        return datetime.now(timezone.utc)

    def _serialize_admissions(self, tx: Tx) -> None:
        """Make admissions (and run creations) one at a time across processes. SQLite: its
        BEGIN IMMEDIATE already holds the file's write lock; PostgreSQL overrides this."""

    # ---- plumbing

    @contextmanager
    def _tx(self, write: bool) -> Iterator[Tx]:
        with self._lock:
            if self._closed:
                raise JournalError("the journal is closed")
            if self._open_tx is not None:  # inside atomic(): one transaction for everything
                yield self._open_tx
                return
            with self._transaction(write) as tx:
                yield tx

    @contextmanager
    def atomic(self) -> Iterator[Tx]:
        """One write transaction that every journal call of this thread joins until it ends:
        what `orchestrator/service/admission.py` evaluates its checks and takes its leases in. All of it
        commits, or (on any exception) none of it. Admissions are serialised across processes
        (SQLite's write lock; a PostgreSQL advisory lock), so two admissions never interleave."""
        with self._lock:
            if self._closed:
                raise JournalError("the journal is closed")
            if self._open_tx is not None:
                raise JournalError("atomic() does not nest")
            with self._transaction(True) as tx:
                self._serialize_admissions(tx)
                self._open_tx = tx
                try:
                    yield tx
                finally:
                    self._open_tx = None

    def _now(self, tx: Tx) -> datetime:
        return _utc(self._now_fn()) if self._now_fn is not None else _utc(self._db_now(tx))

    def _prepare(self, obj: Any, what: str) -> dict:
        """Scrub (if a redactor was given), check JSON-ability, return the dict as stored."""
        if not isinstance(obj, dict):
            raise JournalError(f"{what} must be a dict, not {type(obj).__name__}")
        if self._redactor is not None:
            obj = self._redactor.scrub_obj(obj)
            if not isinstance(obj, dict):
                raise JournalError(f"the redactor turned {what} into a {type(obj).__name__}")
        try:
            text = json.dumps(obj, allow_nan=False, ensure_ascii=False)
        except (TypeError, ValueError) as exc:  # the messages name types, never values
            raise JournalError(f"{what} is not JSON-serialisable: {exc}") from None
        return json.loads(text)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._close_connection()

    def __enter__(self) -> SqlCore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- row conversion

    def _run(self, row: dict[str, Any]) -> RunRecord:
        return RunRecord(
            run_id=row["run_id"],
            host=row["host"],
            runbook=row["runbook"],
            tag=row["tag"],
            kind=row["kind"],
            state=row["state"],
            terminal=bool(row["terminal"]),
            outcome=row["outcome"],
            message=row["message"],
            context=self._json_value(row["context"]) or {},
            created_at=self._ts_value(row["created_at"]),
            updated_at=self._ts_value(row["updated_at"]),
            parent_run_id=row["parent_run_id"],
            seq=int(row["run_seq"] or 0),
        )

    def _transition(self, row: dict[str, Any]) -> TransitionRecord:
        return TransitionRecord(
            run_id=row["run_id"],
            seq=int(row["seq"]),
            from_state=row["from_state"],
            event=row["event"],
            to_state=row["to_state"],
            at=self._ts_value(row["at"]),
            note=row["note"],
        )

    def _effect(self, row: dict[str, Any]) -> EffectRecord:
        return EffectRecord(
            run_id=row["run_id"],
            effect_id=int(row["effect_id"]),
            step=row["step"],
            kind=row["kind"],
            mutating=bool(row["mutating"]),
            request=self._json_value(row["request"]) or {},
            intent_at=self._ts_value(row["intent_at"]),
            outcome=self._json_value(row["outcome"]),
            outcome_at=self._ts_value(row["outcome_at"]) if row["outcome_at"] is not None else None,
        )

    def _lease(self, row: dict[str, Any]) -> Lease:
        return Lease(
            host=row["host"],
            run_id=row["run_id"],
            owner=row["owner"],
            token=int(row["token"]),
            expires_at=self._ts_value(row["expires_at"]),
        )

    # ---- shared checks

    def _load_run(self, tx: Tx, run_id: str, *, lock: bool = False) -> RunRecord:
        row = tx.one(
            f"SELECT {_RUN_COLS} FROM runs WHERE run_id = ?{self.lock_update if lock else ''}",
            run_id,
        )
        if row is None:
            raise RunNotFound(run_id)
        return self._run(row)

    def _run_exists(self, tx: Tx, run_id: str) -> None:
        if tx.one("SELECT 1 AS x FROM runs WHERE run_id = ?", run_id) is None:
            raise RunNotFound(run_id)

    def _lease_row(self, tx: Tx, host: str, lock: str) -> dict[str, Any] | None:
        return tx.one(f"SELECT {_LEASE_COLS} FROM leases WHERE host = ?{lock}", host)

    def _fenced_run(self, tx: Tx, lease: Lease, run_id: str) -> RunRecord:
        """In the write's own transaction: is `lease` still the live lease of the run's host?

        Lock order everywhere: the host's lease row first, then the run row.
        """
        row = tx.one("SELECT host FROM runs WHERE run_id = ?", run_id)
        if row is None:
            raise RunNotFound(run_id)
        if row["host"] != lease.host:
            raise JournalError(
                f"a lease for host {lease.host} cannot write run {run_id} of host {row['host']}"
            )
        lease_row = self._lease_row(tx, lease.host, self.lock_share)
        holder = self._lease(lease_row) if lease_row else None
        released = bool(lease_row and lease_row["released_at"] is not None)
        if holder is None or holder.token != lease.token or released:
            raise Fenced(
                _superseded_text(lease, holder, released) + f"; refusing to write run {run_id}",
                lease,
                holder,
            )
        return self._load_run(tx, run_id, lock=True)
