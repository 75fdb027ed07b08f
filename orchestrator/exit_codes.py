"""Exit codes every `orchestrate` command uses (documented in the README)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    DONE = 0
    UNEXPECTED = 1
    BAD_INPUT = 2
    ROLLED_BACK = 3
    HALTED = 4
    ABORTED = 5


#: Terminal outcome of a run -> the exit code the command returns.
OUTCOME_EXIT = {
    "DONE": ExitCode.DONE,
    "ROLLED_BACK": ExitCode.ROLLED_BACK,
    "HALTED": ExitCode.HALTED,
    "ABORTED": ExitCode.ABORTED,
}
