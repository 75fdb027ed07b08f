"""Opening the journal, every failure a user can fix as one UserError line. `ReadSession` is the
journal alone: the commands that only read runs or record a signal need no inventory or token."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.hosts.redaction import Redactor
from orchestrator.journal import open_journal
from orchestrator.journal.base import JournalError
from orchestrator.journal.sql import Journal
from orchestrator.util.settings import Settings
from orchestrator.util.user_errors import UserError


def open_journal_for(settings: Settings) -> Journal:
    """The settings' journal; a location that cannot be opened is one line, never holding the
    database password."""
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

    settings: Settings
    journal: Journal

    @classmethod
    def open(cls, settings: Settings) -> ReadSession:
        return cls(settings, open_journal_for(settings))

    def close(self) -> None:
        self.journal.close()
