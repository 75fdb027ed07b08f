"""The SQL journal both backends share: every query and every rule (fencing, state checks, lease
takeover), written once with `?` placeholders. The SQLite and PostgreSQL backends only supply a
connection, a transaction and their dialect's type conversions (the hooks below).

Fencing: every acquisition of a host's lease increments that host's token. A fenced write
(`record_transition`, `record_intent`, `record_outcome`, `update_context`) locks the host's
lease row in the same transaction as the write and refuses to write unless the caller's token
is still the host's current, unreleased token. Expiry alone does not fence: a runner whose lease
lapsed but was not taken over may keep writing (and renew it with `heartbeat`); once any other
acquisition happened, its token is stale for good. `end_without_runner` (ending an orphan run) is
not fenced by a token of its own: it locks and judges the host's lease in its transaction.

Operator signals (abort requests, approvals) and the audit list are not fenced: the CLI, operators
and servers write them, not only runners. Run creation and all reads need no lease.
"""

from __future__ import annotations

import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from orchestrator.journal.base import (
    AUDIT_ACTIONS,
    OUTCOMES,
    RUN_KINDS,
    AuditEntry,
    EffectRecord,
    Fenced,
    JournalError,
    Lease,
    LeaseHeld,
    LeaseLost,
    Now,
    RunNotFound,
    RunRecord,
    StateConflict,
    TierHeld,
    TransitionRecord,
    _superseded_text,
    _utc,
    make_run_id,
)


def _require_text(**values: object) -> None:
    """Each value (named by its keyword, in order) must be a non-empty string."""
    for what, value in values.items():
        if not isinstance(value, str) or not value:
            raise JournalError(f"{what} must be a non-empty string")


def _require_ttl(ttl_s: float) -> timedelta:
    if not isinstance(ttl_s, (int, float)) or not ttl_s > 0:
        raise JournalError("lease ttl_s must be a positive number of seconds")
    return timedelta(seconds=float(ttl_s))


class Tx:
    """One open transaction: `?` placeholders, rows as dicts."""

    def __init__(self, cursor: Any, *, placeholder: str) -> None:
        self._cur = cursor
        self._placeholder = placeholder

    def run(self, sql: str, *params: Any) -> int:
        self._cur.execute(sql.replace("?", self._placeholder), params)
        return self._cur.rowcount

    def all(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        self._cur.execute(sql.replace("?", self._placeholder), params)
        return [dict(row) for row in self._cur.fetchall()]

    def one(self, sql: str, *params: Any) -> dict[str, Any] | None:
        rows = self.all(sql, *params)
        return rows[0] if rows else None


_RUN_COLS = (
    "run_id, host, runbook, tag, kind, state, terminal, outcome, message, context, "
    "created_at, updated_at, parent_run_id, run_seq"
)
_RUN_SELECT = _RUN_COLS + " AS seq"  # a run's `run_seq` (the last column) is its record's `seq`
_EFFECT_COLS = "run_id, effect_id, step, kind, mutating, request, intent_at, outcome, outcome_at"
_TRANSITION_COLS = "run_id, seq, from_state, event, to_state, at, note"
_AUDIT_COLS = 'action, actor AS "by", at, detail'  # `by` is a keyword of SQL: quoted
R = TypeVar("R")  # a record (a dataclass of base.py)


class SqlJournal(ABC):
    """The journal over a DB-API connection; subclasses supply the dialect (the hooks).
    Every operation is a method of this class (tests and the explorer wrap them here by name)."""

    dialect: str
    #: the DB-API connection a subclass opens (and migrates); `close` closes it
    _conn: Any
    #: appended to SELECTs that lock rows (empty on SQLite, where BEGIN IMMEDIATE locks the file)
    lock_update: str = ""
    lock_share: str = ""

    def __init__(self, *, now: Now | None = None) -> None:
        self._now_fn = now
        self._lock = threading.RLock()
        self._closed = False
        self.applied_migrations: list[int] = []
        #: the transaction `atomic()` opened (its thread holds `_lock`): every call joins it
        self._open_tx: Tx | None = None

    # ---- dialect hooks (the defaults: a driver that reads and writes timestamps and JSON itself)

    @abstractmethod
    @contextmanager
    def _transaction(self, write: bool) -> Iterator[Tx]: ...

    @abstractmethod
    def _json_param(self, obj: dict | None) -> Any: ...

    def _json_value(self, raw: Any) -> dict | None:
        return raw

    def _ts_param(self, dt: datetime) -> Any:
        return _utc(dt)

    def _ts_value(self, raw: Any) -> datetime:
        return raw.astimezone(UTC)

    def _db_now(self, tx: Tx) -> datetime:
        return datetime.now(UTC)

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
            if self._open_tx is not None:
                raise JournalError("atomic() does not nest")
            with self._tx(write=True) as tx:
                self._serialize_admissions(tx)
                self._open_tx = tx
                try:
                    yield tx
                finally:
                    self._open_tx = None

    def _now(self, tx: Tx) -> datetime:
        return _utc(self._now_fn()) if self._now_fn is not None else _utc(self._db_now(tx))

    def _prepare(self, obj: Any, what: str) -> dict:
        """Check JSON-ability, return the dict as stored. The journal stores what it is given:
        its callers decide what is text for a person (scrubbed before it comes here) and what is
        the run's data (exact: a rollback must find what it names)."""
        if not isinstance(obj, dict):
            raise JournalError(f"{what} must be a dict, not {type(obj).__name__}")
        try:
            text = json.dumps(obj, allow_nan=False, ensure_ascii=False)
        except (TypeError, ValueError) as exc:  # the messages name types, never values
            raise JournalError(f"{what} is not JSON-serialisable: {exc}") from None
        return json.loads(text)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    # ---- row conversion

    def _record(self, cls: type[R], row: dict[str, Any]) -> R:
        """The record `cls` of a row whose columns are its field names (other columns are ignored):
        each value that is not NULL converted by its field's type (timestamps, JSON, flags, numbers)."""
        convert: dict[str, Callable[[Any], Any]] = {
            "datetime": self._ts_value, "dict": self._json_value, "bool": bool, "int": int}
        values: dict[str, Any] = {}
        for f in fields(cls):  # type: ignore[arg-type]  # every record is a dataclass
            value, kind = row[f.name], str(f.type).split(" | ")[0]
            values[f.name] = convert[kind](value) if value is not None and kind in convert else value
        return cls(**values)

    # ---- shared checks

    def _load_run(self, tx: Tx, run_id: str, *, lock: bool = False) -> RunRecord:
        row = tx.one(f"SELECT {_RUN_SELECT} FROM runs WHERE run_id = ?{self.lock_update if lock else ''}", run_id)
        if row is None:
            raise RunNotFound(run_id)
        return self._record(RunRecord, row)

    def _run_exists(self, tx: Tx, run_id: str) -> None:
        if tx.one("SELECT 1 AS x FROM runs WHERE run_id = ?", run_id) is None:
            raise RunNotFound(run_id)

    def _lease_row(self, tx: Tx, host: str, lock: str) -> tuple[Lease | None, bool]:
        """The host's last lease and whether it was released ((None, False): never taken)."""
        row = tx.one(f"SELECT host, token, run_id, owner, expires_at, released_at FROM leases WHERE host = ?{lock}", host)
        return (None, False) if row is None else (self._record(Lease, row), row["released_at"] is not None)

    def _fenced_run(self, tx: Tx, lease: Lease, run_id: str) -> RunRecord:
        """In the write's own transaction: is `lease` still the live lease of the run's host?
        Lock order everywhere: the host's lease row first, then the run row."""
        row = tx.one("SELECT host FROM runs WHERE run_id = ?", run_id)
        if row is None:
            raise RunNotFound(run_id)
        if row["host"] != lease.host:
            raise JournalError(f"a lease for host {lease.host} cannot write run {run_id} of host {row['host']}")
        holder, released = self._lease_row(tx, lease.host, self.lock_share)
        if holder is None or holder.token != lease.token or released:
            raise Fenced(_superseded_text(lease, holder, released) + f"; refusing to write run {run_id}")
        return self._load_run(tx, run_id, lock=True)

    # ---- runs (no lease needed)

    def create_run(self, *, host: str, runbook: str, tag: str | None, kind: str, state: str, context: dict,
                   parent_run_id: str | None = None) -> RunRecord:
        _require_text(host=host, runbook=runbook, state=state)
        if kind not in RUN_KINDS:
            raise JournalError(f"run kind must be one of {sorted(RUN_KINDS)}, not {kind!r}")
        ctx = self._prepare({} if context is None else context, "context")
        with self._tx(write=True) as tx:
            now = self._now(tx)
            if parent_run_id is not None:
                self._run_exists(tx, parent_run_id)
            for _ in range(32):
                run_id = make_run_id(host, now)
                if tx.one("SELECT 1 AS x FROM runs WHERE run_id = ?", run_id) is None:
                    break
            else:  # pragma: no cover - 32 collisions of 16 random bits in one minute
                raise JournalError(f"could not allocate a run id for host {host}")
            self._serialize_admissions(tx)  # the sequence below is taken one creator at a time
            seq = int(tx.one("SELECT COALESCE(MAX(run_seq), 0) + 1 AS n FROM runs")["n"])  # type: ignore[index]  # an aggregate query always returns one row
            tx.run(
                f"INSERT INTO runs ({_RUN_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                run_id, host, runbook, tag, kind, state, False, None, None,
                self._json_param(ctx), self._ts_param(now), self._ts_param(now), parent_run_id, seq,
            )
            return self._load_run(tx, run_id)

    def get_run(self, run_id: str) -> RunRecord:
        with self._tx(write=False) as tx:
            return self._load_run(tx, run_id)

    def list_runs(self, host: str | None = None, limit: int = 50) -> list[RunRecord]:
        where, params = ("WHERE host = ? ", (host,)) if host is not None else ("", ())
        with self._tx(write=False) as tx:
            rows = tx.all(f"SELECT {_RUN_SELECT} FROM runs {where}ORDER BY run_seq DESC LIMIT ?", *params, int(limit))
        return [self._record(RunRecord, r) for r in rows]

    def run_census(self) -> tuple[dict[str, int], list[tuple[str, str]]]:
        """(finished runs counted by outcome, [(run_id, host)] of unfinished runs): what /metrics
        needs, in two queries that never read a run's context (a scrape stays cheap on a big journal)."""
        with self._tx(write=False) as tx:
            done = tx.all("SELECT outcome, COUNT(*) AS n FROM runs WHERE terminal = ? GROUP BY outcome", True)
            unfinished = tx.all("SELECT run_id, host FROM runs WHERE terminal = ?", False)
        return ({str(r["outcome"] or "HALTED"): int(r["n"]) for r in done},
                [(r["run_id"], r["host"]) for r in unfinished])

    def transitions(self, run_id: str) -> list[TransitionRecord]:
        with self._tx(write=False) as tx:
            self._run_exists(tx, run_id)
            rows = tx.all(f"SELECT {_TRANSITION_COLS} FROM transitions WHERE run_id = ? ORDER BY seq", run_id)
        return [self._record(TransitionRecord, r) for r in rows]

    def effects(self, run_id: str) -> list[EffectRecord]:
        with self._tx(write=False) as tx:
            self._run_exists(tx, run_id)
            rows = tx.all(f"SELECT {_EFFECT_COLS} FROM effects WHERE run_id = ? ORDER BY effect_id", run_id)
        return [self._record(EffectRecord, r) for r in rows]

    def open_effects(self, run_id: str) -> list[EffectRecord]:
        """The effects whose outcome is not journaled (intent recorded, then a crash)."""
        return [e for e in self.effects(run_id) if e.outcome_at is None]

    # ---- a run's progress: fenced by the runner's lease

    def record_transition(self, lease: Lease, run_id: str, from_state: str, event: str, to_state: str, *,
                          context: dict | None = None, terminal: bool = False, outcome: str | None = None,
                          message: str | None = None, note: str | None = None) -> TransitionRecord:
        _require_text(from_state=from_state, event=event, to_state=to_state)
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
                raise StateConflict(f"run {run_id} already finished ({run.outcome}, state {run.state}); "
                                    f"refusing {event}")
            if run.state != from_state:
                raise StateConflict(f"run {run_id} is in state {run.state}, not {from_state}; "
                                    f"refusing {event} -> {to_state}")
            seq = self._append_transition(tx, run_id, from_state, event, to_state, now, note, lease.token)
            tx.run(
                "UPDATE runs SET state = ?, terminal = ?, outcome = ?, message = ?, context = ?, "
                "updated_at = ? WHERE run_id = ?",
                to_state, bool(terminal), outcome if terminal else run.outcome,
                message if message is not None else run.message,
                self._json_param(ctx if ctx is not None else run.context),
                self._ts_param(now), run_id,
            )
        return TransitionRecord(run_id, seq, from_state, event, to_state, now, note)

    def _append_transition(self, tx: Tx, run_id: str, from_state: str, event: str, to_state: str,
                           now: datetime, note: str | None, token: int) -> int:
        seq = int(tx.one("SELECT COALESCE(MAX(seq), 0) + 1 AS seq FROM transitions WHERE run_id = ?",
                         run_id)["seq"])  # type: ignore[index]  # an aggregate query always returns one row
        tx.run(
            "INSERT INTO transitions (run_id, seq, from_state, event, to_state, at, note, "
            "lease_token) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            run_id, seq, from_state, event, to_state, self._ts_param(now), note, token,
        )
        return seq

    def record_intent(self, lease: Lease, run_id: str, step: str, kind: str, request: dict, *,
                      mutating: bool) -> EffectRecord:
        _require_text(step=step, **{"effect kind": kind})
        req = self._prepare(request, "request")
        with self._tx(write=True) as tx:
            now = self._now(tx)
            run = self._fenced_run(tx, lease, run_id)
            if run.terminal:
                raise StateConflict(f"run {run_id} already finished ({run.outcome}); refusing a new effect {step}")
            effect_id = int(tx.one("SELECT COALESCE(MAX(effect_id), 0) + 1 AS n FROM effects WHERE run_id = ?",
                                   run_id)["n"])  # type: ignore[index]  # an aggregate query always returns one row
            tx.run(
                "INSERT INTO effects (run_id, effect_id, step, kind, mutating, request, intent_at, "
                "outcome, outcome_at, intent_token) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                run_id, effect_id, step, kind, bool(mutating), self._json_param(req),
                self._ts_param(now), self._json_param(None), None, lease.token,
            )
        return EffectRecord(run_id, effect_id, step, kind, bool(mutating), req, now, None, None)

    def record_outcome(self, lease: Lease, run_id: str, effect_id: int, outcome: dict) -> EffectRecord:
        out = self._prepare(outcome, "outcome")
        with self._tx(write=True) as tx:
            now = self._now(tx)
            self._fenced_run(tx, lease, run_id)
            row = tx.one(f"SELECT {_EFFECT_COLS} FROM effects WHERE run_id = ? AND effect_id = ?{self.lock_update}",
                         run_id, int(effect_id))
            if row is None:
                raise JournalError(f"run {run_id} has no effect {effect_id}")
            if row["outcome_at"] is not None:
                raise JournalError(f"effect {effect_id} of run {run_id} already has an outcome")
            tx.run(
                "UPDATE effects SET outcome = ?, outcome_at = ?, outcome_token = ? "
                "WHERE run_id = ? AND effect_id = ?",
                self._json_param(out), self._ts_param(now), lease.token, run_id, int(effect_id),
            )
        return replace(self._record(EffectRecord, row), outcome=out, outcome_at=now)

    def update_context(self, lease: Lease, run_id: str, context: dict) -> None:
        ctx = self._prepare(context, "context")
        with self._tx(write=True) as tx:
            now = self._now(tx)
            self._fenced_run(tx, lease, run_id)
            tx.run("UPDATE runs SET context = ?, updated_at = ? WHERE run_id = ?",
                   self._json_param(ctx), self._ts_param(now), run_id)

    def end_without_runner(self, run_id: str, from_state: str, outcome: str, message: str, *, note: str | None = None,
                           takeover_if: Callable[[Lease], bool] | None = None) -> TransitionRecord:
        """End a run that no runner drives (`orchestrate abort` of an orphan): its terminal
        transition, written only if the run is still at `from_state` and no live runner holds its
        host's lease for it (LeaseHeld otherwise; `takeover_if(holder)` says a holder is gone).
        Not fenced by a token of its own: the lease row is locked and judged in this transaction,
        and a runner that took the lease before it finds the run terminal (StateConflict)."""
        _require_text(from_state=from_state)
        if outcome not in OUTCOMES:
            raise JournalError(f"outcome must be one of {sorted(OUTCOMES)}, not {outcome!r}")
        with self._tx(write=True) as tx:
            now = self._now(tx)
            run = self._load_run(tx, run_id)
            holder, released = self._lease_row(tx, run.host, self.lock_update)
            own = holder if holder is not None and not released and holder.run_id == run_id else None
            if own is not None and own.expires_at > now and not (takeover_if is not None and takeover_if(own)):
                raise LeaseHeld(own)
            run = self._load_run(tx, run_id, lock=True)
            if run.terminal or run.state != from_state:
                raise StateConflict(f"run {run_id} is {run.outcome or run.state} now, not at {from_state}")
            token = holder.token if holder is not None else 0
            seq = self._append_transition(tx, run_id, from_state, "abort", outcome, now, note, token)
            tx.run(
                "UPDATE runs SET state = ?, terminal = ?, outcome = ?, message = ?, updated_at = ? WHERE run_id = ?",
                outcome, True, outcome, message, self._ts_param(now), run_id,
            )
            if own is not None:
                # the orphan's own lease (expired, or its holder gone) ends with it
                tx.run("UPDATE leases SET released_at = ? WHERE host = ? AND token = ?",
                       self._ts_param(now), run.host, own.token)
        return TransitionRecord(run_id, seq, from_state, "abort", outcome, now, note)

    # ---- host leases (a token that only grows) and `capacity: fleet` tier leases

    def acquire_lease(self, host: str, run_id: str, owner: str, ttl_s: float, *,
                      takeover_if: Callable[[Lease], bool] | None = None) -> tuple[Lease, Lease | None]:
        """Take the host's lease for `run_id`; returns it and the lease it took over (or None).
        A live lease of another run/owner raises LeaseHeld, unless `takeover_if(holder)` says its
        holder is gone (journal/owner.py). The predicate runs in the write transaction on the locked
        holder, so the takeover is a compare-and-swap: a lease renewed or taken meanwhile is judged afresh."""
        _require_text(host=host, run_id=run_id, owner=owner)
        ttl = _require_ttl(ttl_s)
        with self._tx(write=True) as tx:
            now = self._now(tx)
            run = tx.one("SELECT host FROM runs WHERE run_id = ?", run_id)
            if run is not None and run["host"] != host:
                raise JournalError(f"run {run_id} belongs to host {run['host']}, not {host}")
            expires = now + ttl
            # The first acquisition creates the host's row; the row is never deleted, so the
            # token only ever grows. A concurrent first insert waits for ours and does nothing.
            inserted = tx.run(
                "INSERT INTO leases (host, token, run_id, owner, acquired_at, expires_at, "
                "released_at) VALUES (?, 1, ?, ?, ?, ?, NULL) ON CONFLICT (host) DO NOTHING",
                host, run_id, owner, self._ts_param(now), self._ts_param(expires),
            )
            if inserted == 1:
                return Lease(host, run_id, owner, 1, expires), None
            current, released = self._lease_row(tx, host, self.lock_update)
            assert current is not None
            live = not released and current.expires_at > now
            mine = current.run_id == run_id and current.owner == owner
            if live and not mine and not (takeover_if is not None and takeover_if(current)):
                raise LeaseHeld(current)
            previous = None if released or (live and mine) else current  # the lease it takes over
            token = current.token + 1
            tx.run(
                "UPDATE leases SET token = ?, run_id = ?, owner = ?, acquired_at = ?, "
                "expires_at = ?, released_at = NULL WHERE host = ?",
                token, run_id, owner, self._ts_param(now), self._ts_param(expires), host,
            )
        return Lease(host, run_id, owner, token, expires), previous

    def _own_lease(self, tx: Tx, lease: Lease) -> bool:
        """Whether `lease` (still the host's lease: LeaseLost otherwise) was released."""
        holder, released = self._lease_row(tx, lease.host, self.lock_update)
        if holder is None or holder.token != lease.token:
            raise LeaseLost(_superseded_text(lease, holder, False))
        return released

    def heartbeat(self, lease: Lease, ttl_s: float) -> Lease:
        ttl = _require_ttl(ttl_s)
        with self._tx(write=True) as tx:
            now = self._now(tx)
            if self._own_lease(tx, lease):
                raise LeaseLost(_superseded_text(lease, lease, True))
            expires = now + ttl
            tx.run("UPDATE leases SET expires_at = ? WHERE host = ? AND token = ?",
                   self._ts_param(expires), lease.host, lease.token)
        return replace(lease, expires_at=expires)

    def release(self, lease: Lease) -> None:
        with self._tx(write=True) as tx:
            now = self._now(tx)
            if not self._own_lease(tx, lease):
                tx.run("UPDATE leases SET released_at = ? WHERE host = ? AND token = ?",
                       self._ts_param(now), lease.host, lease.token)

    def claim_tier(self, tier: str, host: str, run_id: str, *,
                   takeover_if: Callable[[Lease], bool] | None = None) -> str | None:
        """Take the `capacity: fleet` tier `tier` for `run_id` on `host` (call it inside the
        transaction that takes `host`'s lease). The tier is held by the run that last took it
        for as long as that run holds its own host's lease: unreleased and unexpired, and not
        judged gone by `takeover_if` (journal/owner.py). Raises TierHeld while another host's run
        holds it; returns the run id of a holder it replaced whose lease had lapsed, else None."""
        _require_text(tier=tier, host=host, run_id=run_id)
        with self._tx(write=True) as tx:
            now = self._now(tx)
            row = tx.one(f"SELECT tier, host, run_id FROM tier_leases WHERE tier = ?{self.lock_update}", tier)
            previous: str | None = None
            if row is not None and row["run_id"] != run_id:
                lease = self._held(tx, row["host"])
                if (lease is not None and row["host"] != host and lease.run_id == row["run_id"]
                        and lease.expires_at > now and not (takeover_if is not None and takeover_if(lease))):
                    raise TierHeld(tier, row["host"], row["run_id"], lease.owner)
                previous = row["run_id"]
            tx.run("INSERT INTO tier_leases (tier, host, run_id, acquired_at) VALUES (?, ?, ?, ?) ON CONFLICT (tier) "
                   "DO UPDATE SET host = excluded.host, run_id = excluded.run_id, acquired_at = excluded.acquired_at",
                   tier, host, run_id, self._ts_param(now))
        return previous

    def current_lease(self, host: str) -> Lease | None:
        with self._tx(write=False) as tx:
            now = self._now(tx)
            lease = self._held(tx, host)
        return lease if lease is not None and lease.expires_at > now else None

    def held_lease(self, host: str) -> Lease | None:
        """The host's unreleased lease, expired or not (None: released or never taken): what
        `status` needs to tell a running run from one whose runner stopped."""
        with self._tx(write=False) as tx:
            return self._held(tx, host)

    def _held(self, tx: Tx, host: str) -> Lease | None:
        holder, released = self._lease_row(tx, host, "")
        return None if released else holder

    # ---- operator signals (not fenced: they come from the CLI, not from a runner)

    def _signal(self, run_id: str, sql: str, *params: Any) -> None:
        """Journal an operator's signal once: `sql` inserts (run_id, *params, now), a repeat does nothing."""
        with self._tx(write=True) as tx:
            now = self._now(tx)
            self._run_exists(tx, run_id)
            tx.run(sql, run_id, *params, self._ts_param(now))

    def request_abort(self, run_id: str, by: str) -> None:
        _require_text(by=by)
        self._signal(run_id, "INSERT INTO abort_requests (run_id, requested_by, requested_at) VALUES (?, ?, ?) "
                     "ON CONFLICT (run_id) DO NOTHING", by)

    def abort_requested(self, run_id: str) -> bool:
        with self._tx(write=False) as tx:
            row = tx.one("SELECT r.run_id AS run_id, a.run_id AS aborted FROM runs r "
                         "LEFT JOIN abort_requests a ON a.run_id = r.run_id WHERE r.run_id = ?", run_id)
        if row is None:
            raise RunNotFound(run_id)
        return row["aborted"] is not None

    def approve(self, run_id: str, gate: str, by: str) -> None:
        _require_text(gate=gate, by=by)
        self._signal(run_id, "INSERT INTO approvals (run_id, gate, approved_by, approved_at) VALUES (?, ?, ?, ?) "
                     "ON CONFLICT (run_id, gate) DO NOTHING", gate, by)

    def approvals(self, run_id: str) -> set[str]:
        with self._tx(write=False) as tx:
            self._run_exists(tx, run_id)
            rows = tx.all("SELECT gate FROM approvals WHERE run_id = ?", run_id)
        return {r["gate"] for r in rows}

    # ---- who did what (not fenced: operators and servers write these, not only runners)

    def record_audit(self, run_id: str, action: str, by: str, detail: str | None = None) -> AuditEntry:
        """Append one line to the run's audit list (`AUDIT_ACTIONS`): who did what, journaled."""
        if action not in AUDIT_ACTIONS:
            raise JournalError(f"unknown audit action {action!r}")
        _require_text(by=by)
        with self._tx(write=True) as tx:
            now = self._now(tx)
            self._run_exists(tx, run_id)
            row = tx.one("SELECT MAX(seq) AS seq FROM audit WHERE run_id = ?", run_id)
            seq = int(row["seq"]) + 1 if row and row["seq"] is not None else 1
            tx.run("INSERT INTO audit (run_id, seq, action, actor, at, detail) VALUES (?, ?, ?, ?, ?, ?)",
                   run_id, seq, action, by, self._ts_param(now), detail)
        return AuditEntry(action, by, now, detail)

    def audit(self, run_id: str) -> list[AuditEntry]:
        """The run's audit list, oldest first: its audit rows, approvals and abort request."""
        with self._tx(write=False) as tx:
            self._run_exists(tx, run_id)
            rows = tx.all(f"SELECT {_AUDIT_COLS} FROM audit WHERE run_id = ? ORDER BY seq", run_id)
            rows += tx.all("SELECT 'approved' AS action, approved_by AS \"by\", approved_at AS at, gate AS detail "
                           "FROM approvals WHERE run_id = ?", run_id)
            rows += tx.all("SELECT 'abort_requested' AS action, requested_by AS \"by\", requested_at AS at, "
                           "NULL AS detail FROM abort_requests WHERE run_id = ?", run_id)
        # stable: audit rows keep their order at one timestamp
        return sorted((self._record(AuditEntry, r) for r in rows), key=lambda e: e.at)

    def paused(self, run_id: str) -> AuditEntry | None:
        """The pause that holds the run now (the latest pause/continue is a pause), or None."""
        with self._tx(write=False) as tx:
            row = tx.one(f"SELECT {_AUDIT_COLS} FROM audit WHERE run_id = ? AND action IN ('paused', "
                         "'continued') ORDER BY seq DESC LIMIT 1", run_id)
        return self._record(AuditEntry, row) if row is not None and row["action"] == "paused" else None

    def submitters(self, run_ids: list[str]) -> dict[str, AuditEntry]:
        """Who submitted each of `run_ids` (one query, for a runs list)."""
        if not run_ids:
            return {}
        marks = ", ".join("?" for _ in run_ids)
        with self._tx(write=False) as tx:
            rows = tx.all(f"SELECT run_id, {_AUDIT_COLS} FROM audit WHERE action = 'submitted' "
                          f"AND run_id IN ({marks}) ORDER BY seq", *run_ids)
        out: dict[str, AuditEntry] = {}
        for r in rows:
            out.setdefault(r["run_id"], self._record(AuditEntry, r))
        return out


#: what the executor, the services and the server program against: a journal of either backend
Journal = SqlJournal
