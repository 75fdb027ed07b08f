"""`orchestrate runs`: the journal's runs, newest first (reads the journal only)."""

from __future__ import annotations

import json
import sys
from contextlib import closing
from pathlib import Path

import typer

from orchestrator.cli.options import InventoryOpt, ServerCaOpt, ServerOpt, command_app, flag, remote
from orchestrator.service.reads import load_settings_for, run_view
from orchestrator.service.startup import ReadSession

app = command_app()


@app.command()
def runs(
    host: str | None = typer.Option(None, "--host", metavar="HOST", help="Only this host's runs"),
    as_json: bool = flag("--json", "Machine output: one JSON array of run summaries, newest first (run_id, host, kind, "
                                   "tag, target_tag, state, outcome, message, activity, activity_detail, created_at, "
                                   "updated_at, parent_run_id)"),
    inventory: Path | None = InventoryOpt,
    server: str | None = ServerOpt,
    server_ca: Path | None = ServerCaOpt,
) -> None:
    """List runs, newest first (at most 50): id, kind, host, the tag it goes to (a rollback's is the
    tag it goes back to), state or outcome, activity (running, paused, waiting for approval, interrupted, ended)."""
    remote(server, "runs", {"host": host}, as_json, server_ca)
    with closing(ReadSession.open(load_settings_for(inventory))) as session:
        tables: dict = {}
        items = [run_view(session, r, tables) for r in session.journal.list_runs(host=host, limit=50)]
        if as_json:
            sys.stdout.write(json.dumps(items) + "\n")
            return
        if not items:
            sys.stdout.write(f"no runs{' of ' + host if host else ''} in {session.settings.journal_location()}\n")
        for v in items:
            updated = v["updated_at"][:16].replace("T", " ")
            sys.stdout.write(f"{v['run_id']}  {v['kind']:<8} {v['host']:<6} {v['target_tag'] or '-':<10} "
                             f"{v['outcome'] or v['state']:<28} {v['activity']:<20} {updated}\n")
