"""Fixtures for the journal tests: every backend test runs on SQLite and on PostgreSQL.

`store` is parametrized over both backends. It hands out Journal objects on one shared store
(SQLite: one file in tmp_path; PostgreSQL: one fresh schema, dropped afterwards), each with its
own connection, all reading one injected clock that tests move by hand.

PostgreSQL: ORCHESTRATOR_TEST_POSTGRES_URL if set, else postgresql://postgres@127.0.0.1:5432/test,
else the same as user root. Unreachable -> the PostgreSQL tests are skipped with the connection
errors as the reason; with ORCHESTRATOR_REQUIRE_POSTGRES=1 they fail instead.
"""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from orchestrator.journal import RunRecord, SqliteJournal
from orchestrator.journal.base import SqlJournal

PG_CANDIDATES = (
    "postgresql://postgres@127.0.0.1:5432/test",
    "postgresql://root@127.0.0.1:5432/test",
)

START = datetime(2026, 11, 30, 8, 12, 0, tzinfo=timezone.utc)


class FakeClock:
    """The journal's `now`: wall-clock time that only moves when a test says so."""

    def __init__(self, start: datetime = START) -> None:
        self._t = start
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._t

    def advance(self, seconds: float) -> datetime:
        with self._lock:
            self._t += timedelta(seconds=seconds)
            return self._t


@dataclass
class Store:
    """One journal store; `open()` gives another Journal object (own connection) on it."""

    backend: str
    clock: FakeClock
    location: str  # SQLite file path, or the PostgreSQL URL
    schema: str | None = None  # PostgreSQL only
    journals: list[SqlJournal] = field(default_factory=list)

    def open(self, **kwargs: Any) -> SqlJournal:
        kwargs.setdefault("now", self.clock)
        if self.backend == "sqlite":
            journal: SqlJournal = SqliteJournal(self.location, **kwargs)
        else:
            from orchestrator.journal import PostgresJournal

            journal = PostgresJournal(self.location, schema=self.schema, **kwargs)
        self.journals.append(journal)
        return journal

    def close_all(self) -> None:
        for journal in self.journals:
            journal.close()


def _require_postgres() -> bool:
    return os.environ.get("ORCHESTRATOR_REQUIRE_POSTGRES") == "1"


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """A reachable PostgreSQL URL, or a visible skip (a failure if it is required)."""
    import psycopg

    env_url = os.environ.get("ORCHESTRATOR_TEST_POSTGRES_URL")
    candidates = (env_url,) if env_url else PG_CANDIDATES
    errors = []
    for url in candidates:
        try:
            with psycopg.connect(url, connect_timeout=3, autocommit=True) as conn:
                conn.execute("SELECT 1")
            return url
        except psycopg.Error as exc:
            errors.append(f"{url}: {str(exc).strip()}")
    reason = "PostgreSQL unreachable: " + " | ".join(errors)
    if _require_postgres():
        pytest.fail(reason + " (ORCHESTRATOR_REQUIRE_POSTGRES=1)")
    pytest.skip(reason)


@pytest.fixture
def pg_schema(postgres_url: str) -> Iterator[str]:
    """A fresh, empty schema; dropped (with everything in it) after the test."""
    import psycopg
    from psycopg import sql

    name = f"journal_test_{secrets.token_hex(6)}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Store]:
    if request.param == "sqlite":
        s = Store("sqlite", clock, str(tmp_path / "state" / "journal.db"))
    else:
        url = request.getfixturevalue("postgres_url")
        s = Store("postgres", clock, url, schema=request.getfixturevalue("pg_schema"))
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
