"""`orchestrate approve`: end a soak's approval gate (a journal signal, service.signals)."""

from __future__ import annotations

from pathlib import Path

import typer

from orchestrator.cli.consoles import out
from orchestrator.cli.options import InventoryOpt, RunIdArg, ServerCaOpt, ServerOpt, command_app, flag, signalled_run
from orchestrator.journal.audit import cli_actor
from orchestrator.language.runbook import load_runbook
from orchestrator.service import signals
from orchestrator.service.oncall import nobody_drives

app = command_app()


@app.command()
def approve(
    run_id: str = RunIdArg,
    gate: str | None = typer.Option(None, "--gate", metavar="STATE",
                                       help="Which soak/approval state, e.g. r2.soak, or '*' (default: the one it waits at)"),
    now: bool = flag("--now", "Also end the rest of the soak at once (default: the soak runs its full time)"),
    inventory: Path | None = InventoryOpt,
    server: str | None = ServerOpt,
    server_ca: Path | None = ServerCaOpt,
) -> None:
    """End a soak's approval gate for RUN_ID (journaled: a resumed run never asks again)."""
    body = {"run_id": run_id, "now": now} | ({"gate": gate} if gate else {})
    with signalled_run("approve", body, inventory, server, server_ca) as (session, run):
        gates = None if run.terminal else signals.run_gates(run, lambda: load_runbook(run.runbook))
        out.print(signals.approve(session.journal, run, gate, cli_actor(), gates, now=now)  # who: user@machine
                  + f" (journal {session.settings.journal_location()})", markup=False)
        if (idle := nobody_drives(session.journal, run)) is not None:
            out.print(idle, markup=False)
