"""The SQL logic both journal backends share: every query and every rule (fencing, state checks,
lease takeover), written once with `?` placeholders. The SQLite and PostgreSQL backends only
supply a connection, a transaction and their dialect's type conversions.

Fencing: every acquisition of a host's lease increments that host's token. A fenced write
(`record_transition`, `record_intent`, `record_outcome`, `update_context`) locks the host's
lease row in the same transaction as the write and refuses to write unless the caller's token
is still the host's current, unreleased token. Expiry alone does not fence: a runner whose lease
lapsed but was not taken over may keep writing (and renew it with `heartbeat`); once any other
acquisition happened, its token is stale for good.

The journal is composed of one module per concern: sql_core (transactions, dialect hooks, row
conversion, shared checks), sql_runs (creating and reading runs), sql_writes (fenced writes),
sql_leases (host and tier leases), sql_signals (operator signals and the audit list).
"""

from __future__ import annotations

from orchestrator.journal.sql_core import SqlCore, Tx
from orchestrator.journal.sql_leases import SqlLeases
from orchestrator.journal.sql_runs import SqlRuns
from orchestrator.journal.sql_signals import SqlSignals
from orchestrator.journal.sql_writes import SqlWrites

__all__ = ["SqlCore", "SqlJournal", "Tx"]


class SqlJournal(SqlRuns, SqlWrites, SqlLeases, SqlSignals):
    """The journal over a DB-API connection; subclasses supply the dialect (the hooks of `SqlCore`).

    Every operation is a method of this class (tests and the explorer wrap them here by name).
    """

    def __enter__(self) -> SqlJournal:
        return self
