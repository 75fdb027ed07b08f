"""Fixtures for the journal tests: every backend test runs on SQLite and on PostgreSQL.

`store` is parametrized over both backends. It hands out Journal objects on one shared store
(SQLite: one file in tmp_path; PostgreSQL: one fresh schema, dropped afterwards), each with its
own connection, all reading one injected clock that tests move by hand.

PostgreSQL: ORCHESTRATOR_TEST_POSTGRES_URL if set, else postgresql://postgres@127.0.0.1:5432/test,
else the same as user root. Unreachable -> the PostgreSQL tests are skipped with the connection
errors as the reason; with ORCHESTRATOR_REQUIRE_POSTGRES=1 they fail instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest

from journal_clock import START, FakeClock  # noqa: E402,F401  (re-exported for the tests)
from orchestrator.journal import migrations
from orchestrator.journal.base import RunRecord
from orchestrator.journal.migrations import Migration
from orchestrator.journal.sql import SqlJournal
from orchestrator.journal.sqlite import SqliteJournal


@dataclass
class Store:
    """One journal store; `open()` gives another Journal object (own connection) on it."""

    backend: str
    clock: FakeClock
    location: str  # SQLite file path, or the PostgreSQL URL (its search_path the test's schema)
    journals: list[SqlJournal] = field(default_factory=list)

    def open(self, schema_migrations: tuple[Migration, ...] | None = None, **kwargs: Any) -> SqlJournal:
        """`schema_migrations`: open as an orchestrator that knows these migrations (older or newer)."""
        kwargs.setdefault("now", self.clock)
        with patch.object(migrations, "MIGRATIONS", schema_migrations or migrations.MIGRATIONS):
            if self.backend == "sqlite":
                journal: SqlJournal = SqliteJournal(self.location, **kwargs)
            else:
                from orchestrator.journal.postgres import PostgresJournal

                journal = PostgresJournal(self.location, **kwargs)
        self.journals.append(journal)
        return journal

    def close_all(self) -> None:
        for journal in self.journals:
            journal.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Store]:
    if request.param == "sqlite":
        s = Store("sqlite", clock, str(tmp_path / "state" / "journal.db"))
    else:
        s = Store("postgres", clock, request.getfixturevalue("pg_journal_url"))
    try:
        yield s
    finally:
        s.close_all()


@pytest.fixture
def journal(store: Store) -> SqlJournal:
    return store.open()


MakeRun = Callable[..., RunRecord]


@pytest.fixture
def make_run(journal: SqlJournal) -> MakeRun:
    """create_run with defaults: make_run(host="gpu02", state="INIT", ...)."""

    def make(j: SqlJournal | None = None, **overrides: Any) -> RunRecord:
        args: dict[str, Any] = {
            "host": "gpu02",
            "runbook": "gpu02-glm53-longcontext",
            "tag": "glm53-hicache-w4afp8-v1",
            "kind": "rollout",
            "state": "INIT",
            "context": {},
        }
        args.update(overrides)
        return (j or journal).create_run(**args)

    return make
