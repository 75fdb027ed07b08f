"""The durable run journal: runs, their transitions and effects, host leases, operator signals.

`open_journal(url_or_path)` picks the backend: "postgresql://..." (or "postgres://...") is the
team-mode PostgreSQL journal, anything else a local SQLite file ("sqlite:///path" accepted).
"""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.journal.base import JournalError
from orchestrator.journal.sql import Journal
from orchestrator.journal.sqlite import SqliteJournal

POSTGRES_PREFIXES = ("postgresql://", "postgres://")
_SQLITE_PREFIX = "sqlite:///"


def open_journal(url_or_path: str | os.PathLike[str]) -> Journal:
    """A SQLite file's parent directories are created; "sqlite:///state/journal.db" is relative,
    "sqlite:////var/lib/x.db" absolute."""
    target = os.fspath(url_or_path)
    if target.startswith(POSTGRES_PREFIXES):
        # psycopg, an optional dependency (the `postgres` extra), is imported only for PostgreSQL
        from orchestrator.journal.postgres import PostgresJournal

        return PostgresJournal(target)
    if target.startswith(_SQLITE_PREFIX):
        target = target[len(_SQLITE_PREFIX):]
    elif "://" in target:
        raise JournalError(
            "journal location must be a file path, sqlite:///path or postgresql://... "
            f"(got a {target.split('://', 1)[0]}:// URL)"
        )
    if not target:
        raise JournalError("empty journal path")
    return SqliteJournal(Path(target))

