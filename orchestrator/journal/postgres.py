"""The PostgreSQL journal (team mode): psycopg 3, one connection per Journal object.

Writes run in one transaction each (READ COMMITTED). Lease changes lock the host's lease row
`FOR UPDATE`; fenced writes lock it `FOR SHARE` and check the token in the same transaction, so
a takeover and a stale runner's write are serialised and the write sees the new token. The first
acquisition for a host inserts its row with `ON CONFLICT DO NOTHING`: a racing insert waits for
ours and then finds the row taken. Without an injected clock, time is the database's
(`clock_timestamp()`), so runners on different machines agree on lease expiry.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from orchestrator.journal import migrations
from orchestrator.journal.base import JournalError, Now
from orchestrator.journal.sql import SqlJournal, Tx


class PostgresJournal(SqlJournal):
    dialect = "postgres"
    lock_update = " FOR UPDATE"
    lock_share = " FOR SHARE"

    def __init__(self, conninfo: str, *, now: Now | None = None) -> None:
        """`conninfo`: a libpq URL or DSN (its `options=-csearch_path%3D...` chooses the schema)."""
        super().__init__(now=now)
        try:
            self._conn = psycopg.connect(
                conninfo,
                autocommit=True,  # transactions are explicit: conn.transaction()
                row_factory=dict_row,
                connect_timeout=10,  # seconds
                application_name="orchestrator-journal",
            )
        except psycopg.Error as exc:
            # libpq's message names host, port and user, never the password.
            raise JournalError(f"cannot connect to the PostgreSQL journal: {exc}") from exc
        try:
            with self._tx(write=True) as tx:
                # Serialise concurrent migrators of the same schema.
                tx.run(
                    "SELECT pg_advisory_xact_lock("
                    "hashtext('orchestrator.journal:' || COALESCE(current_schema(), '')))"
                )
                self.applied_migrations = migrations.migrate(tx, self.dialect, self._now(tx), self._ts_param)
        except BaseException:
            self._conn.close()
            raise

    @contextmanager
    def _transaction(self, write: bool) -> Iterator[Tx]:
        with self._conn.transaction():
            with self._conn.cursor() as cur:
                yield Tx(cur, placeholder="%s")

    def _serialize_admissions(self, tx: Tx) -> None:
        # released at the end of the transaction; re-taking it in the same transaction is a no-op
        tx.run("SELECT pg_advisory_xact_lock(hashtext('orchestrator.journal.admission:' || COALESCE(current_schema(), '')))")

    def _db_now(self, tx: Tx) -> datetime:
        row = tx.one("SELECT clock_timestamp() AS now")
        assert row is not None
        return row["now"]

    def _json_param(self, obj: dict | None) -> Any:
        return None if obj is None else Jsonb(obj)

    def __repr__(self) -> str:
        info = self._conn.info
        return f"PostgresJournal(host={info.host!r}, dbname={info.dbname!r})"
