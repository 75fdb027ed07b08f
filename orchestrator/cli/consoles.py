"""The command line's two rich consoles, `plain` for a line printed as it is, and whether a command has already said what a Ctrl-C
stopped (`orchestrator.cli.main` says it otherwise: typer's own 130 is silent)."""

from __future__ import annotations

import sys

from rich.console import Console

# emoji=False: a `:name:` in a log line or a host's answer is text, never an emoji
err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)
out = Console(highlight=False, soft_wrap=True, emoji=False)

#: Set once a command has said what a Ctrl-C stopped.
INTERRUPT_TOLD: list[bool] = []


def plain(line: str) -> None:
    """One line on stdout exactly as given (no markup, no emoji codes, no wrap)."""
    sys.stdout.write(line + "\n")
