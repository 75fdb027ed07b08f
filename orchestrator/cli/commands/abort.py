"""`orchestrate abort`: ask a run to take its rollback (a journal signal; a run nobody drives is
ended here with what the host shows)."""

from __future__ import annotations

import asyncio
from contextlib import closing
from pathlib import Path

from orchestrator.cli.consoles import out
from orchestrator.cli.options import InventoryOpt, RunIdArg, ServerCaOpt, ServerOpt, command_app, signalled_run
from orchestrator.journal.audit import cli_actor
from orchestrator.service import signals
from orchestrator.service.orphans import end_unowned
from orchestrator.service.session import Session, owner_id

app = command_app()


@app.command()
def abort(
    run_id: str = RunIdArg,
    inventory: Path | None = InventoryOpt,
    server: str | None = ServerOpt,
    server_ca: Path | None = ServerCaOpt,
) -> None:
    """Ask RUN_ID to take its current phase's rollback (the whole-host rollback once r2 has moved)."""
    with signalled_run("abort", {"run_id": run_id}, inventory, server, server_ca) as (session, run):
        settings = session.settings
        result = signals.abort(session.journal, run, cli_actor())  # who: user@machine
    if result.runner is None:  # nobody drives it: read the host and end it with what is true
        with closing(Session.open(settings)) as full:
            ended = asyncio.run(end_unowned(full, full.journal.get_run(run_id), owner_id()))
        if ended is not None:
            out.print(ended + f" (journal {settings.journal_location()})", markup=False)
            return
    out.print(result.message + f" (journal {settings.journal_location()})", markup=False)
