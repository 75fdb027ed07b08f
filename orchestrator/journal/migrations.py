"""Versioned schema migrations, one logical schema for SQLite and PostgreSQL.

Each migration is a list of statements written once with type placeholders ({ts}, {json},
{bool}, {bigint}) that `render` turns into the dialect's types. `migrate` runs inside one write
transaction of the backend (SQLite: BEGIN IMMEDIATE; PostgreSQL: with a transaction-scoped
advisory lock), so two processes opening the same journal at once apply each migration once.
Applied versions are rows of `schema_version`; applying is idempotent.

Append new migrations to MIGRATIONS with the next version (tests/journal checks the numbering);
never edit an applied one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from orchestrator.journal.base import JournalError
from orchestrator.util.outcome import Outcome

if TYPE_CHECKING:
    from orchestrator.journal.sql import Tx

DIALECT_TYPES: dict[str, dict[str, str]] = {
    "sqlite": {"ts": "TEXT", "json": "TEXT", "bool": "INTEGER", "bigint": "INTEGER"},
    "postgres": {"ts": "TIMESTAMPTZ", "json": "JSONB", "bool": "BOOLEAN", "bigint": "BIGINT"},
}


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]


class SchemaTooNew(JournalError):
    """The journal was migrated by a newer orchestrator than this one."""


SCHEMA_VERSION_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_version ("
    " version INTEGER PRIMARY KEY,"
    " description TEXT NOT NULL,"
    " applied_at {ts} NOT NULL)"
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "runs, their transitions and their effects",
        (
            """CREATE TABLE runs (
                run_id TEXT PRIMARY KEY,
                host TEXT NOT NULL,
                runbook TEXT NOT NULL,
                tag TEXT,
                kind TEXT NOT NULL CHECK (kind IN ('rollout', 'rollback')),
                state TEXT NOT NULL,
                terminal {bool} NOT NULL,
                outcome TEXT CHECK (outcome IS NULL
                                    OR outcome IN ({outcomes})),
                message TEXT,
                context {json} NOT NULL,
                created_at {ts} NOT NULL,
                updated_at {ts} NOT NULL,
                parent_run_id TEXT REFERENCES runs (run_id)
            )""",
            "CREATE INDEX runs_by_host ON runs (host, created_at)",
            "CREATE INDEX runs_by_time ON runs (created_at)",
            """CREATE TABLE transitions (
                run_id TEXT NOT NULL REFERENCES runs (run_id),
                seq INTEGER NOT NULL,
                from_state TEXT NOT NULL,
                event TEXT NOT NULL,
                to_state TEXT NOT NULL,
                at {ts} NOT NULL,
                note TEXT,
                lease_token {bigint} NOT NULL,
                PRIMARY KEY (run_id, seq)
            )""",
            """CREATE TABLE effects (
                run_id TEXT NOT NULL REFERENCES runs (run_id),
                effect_id INTEGER NOT NULL,
                step TEXT NOT NULL,
                kind TEXT NOT NULL,
                mutating {bool} NOT NULL,
                request {json} NOT NULL,
                intent_at {ts} NOT NULL,
                outcome {json},
                outcome_at {ts},
                intent_token {bigint} NOT NULL,
                outcome_token {bigint},
                PRIMARY KEY (run_id, effect_id)
            )""",
        ),
    ),
    Migration(
        2,
        "host leases with per-host fencing tokens",
        (
            # One row per host, never deleted: `token` is the host's fencing counter.
            """CREATE TABLE leases (
                host TEXT PRIMARY KEY,
                token {bigint} NOT NULL CHECK (token > 0),
                run_id TEXT NOT NULL,
                owner TEXT NOT NULL,
                acquired_at {ts} NOT NULL,
                expires_at {ts} NOT NULL,
                released_at {ts}
            )""",
        ),
    ),
    Migration(
        3,
        "operator signals: abort requests and gate approvals",
        (
            """CREATE TABLE abort_requests (
                run_id TEXT PRIMARY KEY REFERENCES runs (run_id),
                requested_by TEXT NOT NULL,
                requested_at {ts} NOT NULL
            )""",
            """CREATE TABLE approvals (
                run_id TEXT NOT NULL REFERENCES runs (run_id),
                gate TEXT NOT NULL,
                approved_by TEXT NOT NULL,
                approved_at {ts} NOT NULL,
                PRIMARY KEY (run_id, gate)
            )""",
        ),
    ),
    Migration(
        4,
        "runs ordered by a journal sequence, never by a clock; tier leases (orchestrator/service/admission.py)",
        (
            # The order runs were admitted in: assigned by the journal inside the transaction that
            # creates the run, so a wall clock stepped back cannot make an older run look newer.
            "ALTER TABLE runs ADD COLUMN run_seq {bigint}",
            # runs journaled before this migration keep the order their clocks gave them
            """UPDATE runs SET run_seq = (SELECT COUNT(*) FROM runs r2 WHERE r2.created_at < runs.created_at
                                         OR (r2.created_at = runs.created_at AND r2.run_id <= runs.run_id))""",
            "CREATE UNIQUE INDEX runs_by_seq ON runs (run_seq)",
            "CREATE INDEX runs_by_host_seq ON runs (host, run_seq)",
            # One row per `capacity: fleet` tier: the run that last took the tier. It holds the
            # tier while that run holds its own host's lease (no TTL of its own: the host lease's
            # heartbeat, release and takeover are the tier's).
            """CREATE TABLE tier_leases (
                tier TEXT PRIMARY KEY,
                host TEXT NOT NULL,
                run_id TEXT NOT NULL,
                acquired_at {ts} NOT NULL
            )""",
        ),
    ),
    Migration(
        5,
        "who did what: the audit list of a run (submitted, adopted, paused, continued)",
        (
            """CREATE TABLE audit (
                run_id TEXT NOT NULL REFERENCES runs (run_id),
                seq {bigint} NOT NULL,
                action TEXT NOT NULL,
                actor TEXT NOT NULL,
                at {ts} NOT NULL,
                detail TEXT,
                PRIMARY KEY (run_id, seq)
            )""",
        ),
    ),
)


def render(sql: str, dialect: str) -> str:
    return sql.format(**DIALECT_TYPES[dialect], outcomes=", ".join(f"'{o.value}'" for o in Outcome))


def migrate(tx: Tx, dialect: str, now: datetime, ts_param: Callable[[datetime], Any]) -> list[int]:
    """Apply what is pending of MIGRATIONS inside the caller's (locked) transaction; return the
    versions applied. A journal migrated by a newer orchestrator is refused (SchemaTooNew)."""
    tx.run(render(SCHEMA_VERSION_TABLE, dialect))
    done = {int(r["version"]) for r in tx.all("SELECT version FROM schema_version")}
    newest_known = MIGRATIONS[-1].version
    if done and max(done) > newest_known:
        raise SchemaTooNew(
            f"the journal is at schema version {max(done)}, newer than this orchestrator "
            f"knows ({newest_known}); upgrade the orchestrator"
        )
    todo = [m for m in MIGRATIONS if m.version not in done]
    for migration in todo:
        for statement in migration.statements:
            tx.run(render(statement, dialect))
        tx.run(
            "INSERT INTO schema_version (version, description, applied_at) VALUES (?, ?, ?)",
            migration.version, migration.description, ts_param(now),
        )
    return [m.version for m in todo]
