"""Exit codes every `orchestrate` command uses (documented in the README)."""

from __future__ import annotations

from enum import IntEnum

from orchestrator.util.outcome import Outcome


class ExitCode(IntEnum):
    DONE = 0
    UNEXPECTED = 1
    BAD_INPUT = 2
    ROLLED_BACK = 3
    HALTED = 4
    ABORTED = 5


#: Exit code of a run stopped by Ctrl-C (128 + SIGINT, the shell's convention).
INTERRUPTED_EXIT = 130

#: Terminal outcome of a run -> the exit code the command returns (the code of the same name).
OUTCOME_EXIT = {outcome: ExitCode[outcome.name] for outcome in Outcome}
