"""Schema migrations: an empty store is upgraded, an existing one re-opened, a newer one refused."""

from __future__ import annotations

import sqlite3
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from orchestrator.journal.migrations import MIGRATIONS, Migration, SchemaTooNew
from orchestrator.journal.sqlite import SqliteJournal

LATEST = MIGRATIONS[-1].version
FUTURE = Migration(LATEST + 1, "notes", ("CREATE TABLE notes (id INTEGER PRIMARY KEY, body {json})",))


def raw(store, sql: str) -> list[tuple[Any, ...]]:
    """Query the store behind the journal's back, on a connection of its own."""
    if store.backend == "sqlite":
        with sqlite3.connect(store.location) as conn:
            return [tuple(r) for r in conn.execute(sql).fetchall()]
    import psycopg

    with psycopg.connect(store.location) as conn:
        return [tuple(r) for r in conn.execute(sql).fetchall()]


def raw_write(store, sql: str) -> None:
    """Write behind the journal's back (rows in an older schema than the code writes)."""
    if store.backend == "sqlite":
        with sqlite3.connect(store.location) as conn:
            conn.execute(sql)
        return
    import psycopg

    with psycopg.connect(store.location) as conn:
        conn.execute(sql)


def test_an_empty_store_is_migrated_to_the_latest_version(store) -> None:
    journal = store.open()
    assert journal.applied_migrations == [m.version for m in MIGRATIONS] == [1, 2, 3, 4, 5]
    rows = raw(store, "SELECT version, description FROM schema_version ORDER BY version")
    assert rows == [(m.version, m.description) for m in MIGRATIONS]


def test_reopening_applies_nothing_and_keeps_the_data(store, make_run) -> None:
    run = make_run()
    store.close_all()
    again = store.open()
    assert again.applied_migrations == []
    assert again.get_run(run.run_id) == run
    assert len(raw(store, "SELECT version FROM schema_version")) == len(MIGRATIONS)


def test_upgrading_an_older_store(store, clock) -> None:
    old = store.open(schema_migrations=MIGRATIONS[:1])
    assert old.applied_migrations == [1]
    old.close()
    # two v1 runs (the code of today writes v4 rows): the one created later by its clock is newer
    for run_id, at in (("gpu02-b", "2026-11-30T08:13:00.000000Z"), ("gpu02-a", "2026-11-30T08:12:00.000000Z")):
        ts = f"'{at}'" if store.backend == "sqlite" else f"TIMESTAMPTZ '{at}'"
        ctx = "'{\"from\": \"v1\"}'"
        raw_write(store, f"INSERT INTO runs (run_id, host, runbook, tag, kind, state, terminal, outcome, message, "
                         f"context, created_at, updated_at, parent_run_id) VALUES ('{run_id}', 'gpu02', 'rb', NULL, "
                         f"'rollout', 'INIT', {'0' if store.backend == 'sqlite' else 'false'}, NULL, NULL, {ctx}, "
                         f"{ts}, {ts}, NULL)")

    new = store.open()
    assert new.applied_migrations == [2, 3, 4, 5]
    run = new.get_run("gpu02-a")
    assert run.context == {"from": "v1"}
    # v4: the sequence backfilled in the old clock order, and new runs come after
    assert [r.run_id for r in new.list_runs("gpu02")] == ["gpu02-b", "gpu02-a"]
    assert new.get_run("gpu02-b").seq == 2 and run.seq == 1
    later = new.create_run(host="gpu02", runbook="rb", tag=None, kind="rollout", state="INIT", context={})
    assert later.seq == 3 and new.list_runs("gpu02")[0].run_id == later.run_id
    lease, _ = new.acquire_lease("gpu02", run.run_id, "runner-a", 60)  # v2's table works
    new.approve(run.run_id, "gate-1", "alice")  # v3's table works
    assert new.approvals(run.run_id) == {"gate-1"}
    new.record_audit(run.run_id, "paused", "bob")  # v4's table works
    assert sorted((e.action, e.by) for e in new.audit(run.run_id)) == [("approved", "alice"), ("paused", "bob")]
    assert new.paused(run.run_id).by == "bob"
    new.record_audit(run.run_id, "submitted", "carol", "rollout")
    assert new.submitters([run.run_id, "nope"])[run.run_id].by == "carol" and new.submitters([]) == {}


def test_a_newer_store_is_refused_by_an_older_orchestrator(store) -> None:
    store.open().close()
    assert store.open(schema_migrations=MIGRATIONS + (FUTURE,)).applied_migrations == [FUTURE.version]
    with pytest.raises(SchemaTooNew, match=f"schema version {FUTURE.version}"):
        store.open()


def test_a_failing_migration_leaves_nothing_behind(store) -> None:
    store.open().close()
    broken = Migration(LATEST + 1, "half", (
        "CREATE TABLE half_done (id INTEGER PRIMARY KEY)",
        "THIS IS NOT SQL",
    ))
    with pytest.raises(Exception):
        store.open(schema_migrations=MIGRATIONS + (broken,))
    store.open().close()
    assert max(v for (v,) in raw(store, "SELECT version FROM schema_version")) == LATEST
    # The migration's first statement was rolled back with it.
    fixed = Migration(LATEST + 1, "half", ("CREATE TABLE half_done (id INTEGER PRIMARY KEY)",))
    assert store.open(schema_migrations=MIGRATIONS + (fixed,)).applied_migrations == [LATEST + 1]


def test_concurrent_first_opens_apply_each_migration_once(store) -> None:
    n = 4
    barrier = threading.Barrier(n)

    def open_one() -> list[int]:
        barrier.wait(timeout=60)
        return store.open().applied_migrations

    with ThreadPoolExecutor(max_workers=n) as pool:
        applied = [f.result(timeout=60) for f in [pool.submit(open_one) for _ in range(n)]]
    assert sorted(v for versions in applied for v in versions) == [1, 2, 3, 4, 5]


def test_migrations_are_numbered_one_by_one_from_1() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))


def test_sqlite_file_settings(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "journal.db"
    journal = SqliteJournal(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    conn = journal._conn
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    journal.close()


def _sqlite_columns(path: Path) -> dict[str, list[str]]:
    with sqlite3.connect(path) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: [r[1] for r in conn.execute(f"PRAGMA table_info({t})")] for t in tables}


def _postgres_columns(url: str, schema: str) -> dict[str, list[str]]:
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = %s ORDER BY table_name, ordinal_position",
            (schema,),
        ).fetchall()
    out: dict[str, list[str]] = {}
    for table, column in rows:
        out.setdefault(table, []).append(column)
    return out


@pytest.mark.postgres
def test_both_backends_share_the_logical_schema(tmp_path: Path, postgres_url: str, pg_schema: str,
                                                 pg_journal_url: str) -> None:
    from orchestrator.journal.postgres import PostgresJournal

    SqliteJournal(tmp_path / "j.db").close()
    PostgresJournal(pg_journal_url).close()
    lite = _sqlite_columns(tmp_path / "j.db")
    pg = _postgres_columns(postgres_url, pg_schema)
    assert lite == pg
    assert set(lite) == {"schema_version", "runs", "transitions", "effects", "leases",
                         "abort_requests", "approvals", "tier_leases", "audit"}
