"""`orchestrate pause`: hold a run at its next safe step (a journal signal, service.signals)."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

from orchestrator.cli.consoles import out
from orchestrator.cli.options import InventoryOpt, RunIdArg, ServerCaOpt, ServerOpt, command_app, remote
from orchestrator.journal import audit
from orchestrator.service import signals
from orchestrator.service.reads import get_run, load_settings_for
from orchestrator.service.startup import ReadSession

app = command_app()


@app.command()
def pause(
    run_id: str = RunIdArg,
    inventory: Path | None = InventoryOpt,
    server: str | None = ServerOpt,
    server_ca: Path | None = ServerCaOpt,
) -> None:
    """Hold RUN_ID at its next safe step (never between a down and its replacement's readiness)
    until `orchestrate continue RUN_ID` (journaled, with who asked)."""
    signal_run(run_id, "pause", inventory, server, server_ca)


def signal_run(run_id: str, action: str, inventory: Path | None, server: str | None, server_ca: Path | None) -> None:
    """`pause` or `continue`: journaled with who asked (here, or through --server)."""
    remote(server, action, {"run_id": run_id}, False, server_ca)
    with closing(ReadSession.open(load_settings_for(inventory))) as session:
        run = get_run(session, run_id)
        do = signals.pause if action == "pause" else signals.continue_run
        out.print(do(session.journal, run, audit.cli_actor()), markup=False)
