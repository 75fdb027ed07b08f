"""Opening what a command needs, with every failure a user can fix as one UserError line.

`open_journal_for` opens the settings' journal (SQLite under the state directory, or PostgreSQL);
`ReadSession` is the journal alone, for the commands that only read runs or record an operator
signal (`status`, `runs`, `approve`, `abort`): they need no inventory and no host token.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.hosts.redaction import Redactor
from orchestrator.journal import open_journal
from orchestrator.journal.base import JournalError
from orchestrator.journal.sql import Journal
from orchestrator.util.settings import Settings
from orchestrator.util.user_errors import UserError


def open_journal_for(settings: Settings) -> Journal:
    """The settings' journal; a location that cannot be opened is one UserError line (exit 2).
    The message never holds the database password. The journal stores what it is given: a run
    scrubs its text before journaling it and keeps its data exact (engine/executor/runtime.py)."""
    loc = settings.journal_url()
    try:
        if not settings.database_url:
            settings.state_dir.mkdir(parents=True, exist_ok=True)
        return open_journal(loc)
    except (OSError, JournalError) as exc:
        text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        where = "ORCHESTRATOR_DATABASE_URL" if settings.database_url else f"ORCHESTRATOR_STATE_DIR ({settings.state_dir})"
        text = " ".join(Redactor(settings.database_password()).scrub(text).split())  # libpq's messages span lines
        raise UserError(f"cannot open the journal: {text}; check {where}") from None


@dataclass
class ReadSession:
    """The journal and the settings: what `Session` offers the read-only commands."""

    settings: Settings
    journal: Journal

    @classmethod
    def open(cls, settings: Settings) -> ReadSession:
        return cls(settings, open_journal_for(settings))

    def close(self) -> None:
        self.journal.close()
