"""The command line's two rich consoles, and whether a command has already said what a Ctrl-C
stopped (`orchestrator.cli.main` says it otherwise: typer's own 130 is silent)."""

from __future__ import annotations

from rich.console import Console

# emoji=False: a `:name:` in a log line or a host's answer is text, never an emoji
err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)
out = Console(highlight=False, soft_wrap=True, emoji=False)

#: Set once a command has said what a Ctrl-C stopped.
INTERRUPT_TOLD: list[bool] = []
