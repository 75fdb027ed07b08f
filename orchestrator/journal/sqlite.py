"""The SQLite journal: one local file, WAL, one connection per Journal object.

Every write runs in `BEGIN IMMEDIATE`, which takes the database's write lock before the first
read, so the fencing check, the state check and the write see the same committed state even
with several processes on one file; `busy_timeout` makes the others wait instead of failing.
Timestamps are stored as fixed-width UTC ISO-8601 text (they sort as text), dicts as JSON text.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_random_exponential

from orchestrator.journal import migrations
from orchestrator.journal.base import JournalError, Now, _utc
from orchestrator.journal.sql import SqlJournal, Tx

_TS_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
#: How long a writer waits for another connection's write lock before it fails.
BUSY_TIMEOUT_S = 30.0


def is_busy(exc: BaseException) -> bool:
    """SQLite's "database is locked" (or busy): another connection holds the write lock."""
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))


class SqliteJournal(SqlJournal):
    dialect = "sqlite"

    def __init__(self, path: str | os.PathLike[str], *, now: Now | None = None) -> None:
        super().__init__(now=now)
        self.path = Path(path).expanduser()
        in_memory = str(path) == ":memory:"
        if not in_memory:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not self.path.exists():
                # The journal holds run contexts: readable by its owner only.
                os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
        try:
            self._conn = sqlite3.connect(
                str(self.path),
                timeout=BUSY_TIMEOUT_S,
                isolation_level=None,  # we issue BEGIN/COMMIT ourselves
                check_same_thread=False,  # guarded by the base class's lock
            )
        except sqlite3.Error as exc:
            raise JournalError(f"cannot open the journal {self.path}: {exc}") from exc
        self._conn.row_factory = sqlite3.Row
        self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        mode = self._enable_wal() if not in_memory else "memory"
        if mode.lower() != "wal" and not in_memory:
            self._conn.close()
            raise JournalError(f"the journal {self.path} cannot use WAL (journal_mode={mode})")
        self._conn.execute("PRAGMA synchronous = FULL")
        self._conn.execute("PRAGMA foreign_keys = ON")
        with self._tx(write=True) as tx:
            self.applied_migrations = migrations.migrate(tx, self.dialect, self._now(tx), self._ts_param)

    def _enable_wal(self) -> str:
        """Switch the file to WAL (persistent, so usually done already). The switch needs an exclusive
        lock, and SQLite may answer SQLITE_BUSY without calling the busy handler when another
        connection opens a fresh file at the same moment: retried within the busy timeout."""
        mode = self._conn.execute("PRAGMA journal_mode").fetchone()[0]
        if mode.lower() == "wal":
            return mode
        retrying = Retrying(
            retry=retry_if_exception(is_busy),
            wait=wait_random_exponential(multiplier=0.005, max=0.2),
            stop=stop_after_delay(BUSY_TIMEOUT_S),
            reraise=True,
        )
        return retrying(lambda: self._conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])

    @contextmanager
    def _transaction(self, write: bool) -> Iterator[Tx]:
        cur = self._conn.cursor()
        try:
            cur.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield Tx(cur, placeholder="?")
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise
            cur.execute("COMMIT")
        finally:
            cur.close()

    def _ts_param(self, dt: datetime) -> str:
        return _utc(dt).strftime(_TS_FORMAT)

    def _ts_value(self, raw: Any) -> datetime:
        # every row read parses its timestamps (the executor reads a run's transitions at each
        # step): fromisoformat reads the one format we write, ~10x cheaper than strptime
        return datetime.fromisoformat(raw).astimezone(UTC)

    def _json_param(self, obj: dict | None) -> str | None:
        return None if obj is None else json.dumps(obj, ensure_ascii=False, allow_nan=False)

    def _json_value(self, raw: Any) -> dict | None:
        return None if raw is None else json.loads(raw)

    def __repr__(self) -> str:
        return f"SqliteJournal({str(self.path)!r})"
