"""How a run ends: the one list of outcome names. The machine's terminal states, the journal's
`outcome` column, the exit codes, the server's metrics and the CLI all use this enum."""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    DONE = "DONE"
    ROLLED_BACK = "ROLLED_BACK"
    ABORTED = "ABORTED"
    HALTED = "HALTED"
