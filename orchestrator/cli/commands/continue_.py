"""`orchestrate continue`: let a paused run go on (a journal signal, service.signals)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.cli.commands.pause import signal_run
from orchestrator.cli.options import InventoryOpt, RunIdArg, ServerCaOpt, ServerOpt, command_app

app = command_app()


@app.command("continue")
def continue_(
    run_id: str = RunIdArg,
    inventory: Path | None = InventoryOpt,
    server: str | None = ServerOpt,
    server_ca: Path | None = ServerCaOpt,
) -> None:
    """Let a paused RUN_ID go on (journaled, with who asked)."""
    signal_run(run_id, "continue", inventory, server, server_ca)
