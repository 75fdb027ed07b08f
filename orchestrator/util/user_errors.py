"""Errors a user can cause. The CLI prints them as one line on stderr and exits with `code`."""

from __future__ import annotations

from orchestrator.util.exit_codes import ExitCode


class UserError(Exception):
    """Bad input: unknown host, malformed tag, invalid YAML... One line naming what to fix."""

    code: ExitCode = ExitCode.BAD_INPUT

    def __init__(self, message: str, *, code: ExitCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class Refused(UserError):
    """The command was understood but refused before any change (exit 5)."""

    code = ExitCode.ABORTED
