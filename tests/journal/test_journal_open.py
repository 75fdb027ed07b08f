"""open_journal: which backend a location selects."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import pytest

from orchestrator.journal import open_journal
from orchestrator.journal.base import JournalError
from orchestrator.journal.sqlite import SqliteJournal


def test_plain_path_creates_parent_directories(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "journal.db"
    journal = open_journal(str(target))
    assert isinstance(journal, SqliteJournal) and target.exists()
    journal.close()


def test_pathlike_and_sqlite_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with closing(open_journal(tmp_path / "p.db")) as journal:
        assert isinstance(journal, SqliteJournal)
    with closing(open_journal(f"sqlite:///{tmp_path}/abs.db")) as journal:  # sqlite:////abs/path
        assert journal.path == tmp_path / "abs.db"
    monkeypatch.chdir(tmp_path)
    with closing(open_journal("sqlite:///rel/j.db")) as journal:
        assert (tmp_path / "rel" / "j.db").exists()


def test_unknown_schemes_are_refused(tmp_path: Path) -> None:
    with pytest.raises(JournalError, match="mysql://"):
        open_journal("mysql://user@host/db")
    with pytest.raises(JournalError):
        open_journal("")


@pytest.mark.postgres
def test_postgresql_url_selects_postgres(pg_journal_url: str) -> None:
    from orchestrator.journal.postgres import PostgresJournal

    with closing(open_journal(pg_journal_url)) as journal:
        assert isinstance(journal, PostgresJournal)
        assert journal.applied_migrations == [1, 2, 3, 4, 5]
        run = journal.create_run(host="gpu02", runbook="rb", tag=None, kind="rollout",
                                 state="INIT", context={"db": "clock"})
        # No injected clock: the database's clock, in UTC.
        assert run.created_at.utcoffset().total_seconds() == 0
    with closing(PostgresJournal(pg_journal_url)) as again:
        assert again.applied_migrations == [] and again.get_run(run.run_id) == run


def test_unreachable_postgres_is_a_journal_error() -> None:
    from orchestrator.journal.postgres import PostgresJournal

    # Port 1 on loopback: nothing listens there.
    with pytest.raises(JournalError, match="cannot connect"):
        PostgresJournal("postgresql://nobody:pw-not-shown@127.0.0.1:1/x")
