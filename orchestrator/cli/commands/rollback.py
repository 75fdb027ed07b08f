"""`orchestrate rollback`: a host's replicas back on the previous tag and file, through the service."""

from __future__ import annotations

from pathlib import Path

import typer

from orchestrator.cli.options import (
    InventoryOpt,
    JsonOpt,
    ServerCaOpt,
    ServerOpt,
    SoakOpt,
    YesOpt,
    command_app,
    remote,
)
from orchestrator.cli.render import finish, hooks
from orchestrator.service import runs
from orchestrator.service.requests import RollbackRequest

app = command_app()


@app.command()
def rollback(
    host: str = typer.Argument(..., metavar="HOST", help="Host name from the inventory, e.g. gpu02"),
    replica: str = typer.Option("all", "--replica", metavar="all|r2|r1",
                                help="Which replicas (all: r2 first, one replica serving at every moment)"),
    to_tag: str | None = typer.Option(None, "--to-tag", metavar="TAG",
                                         help="Tag to go back to (with --to-file); default: the previous tag the last rollout journaled, else the action log's"),
    to_file: str | None = typer.Option(None, "--to-file", metavar="FILE",
                                          help="Compose file (repository path) to go back to (with --to-tag), e.g. prod/GLM-5.3-....yaml"),
    runbook: str | None = typer.Option(None, "--runbook", metavar="NAME|PATH",
                                          help="Runbook whose rollback to run (default: the last rollout's runbook)"),
    yes: bool = YesOpt,
    soak: str | None = SoakOpt,
    as_json: bool = JsonOpt,
    inventory: Path | None = InventoryOpt,
    server: str | None = ServerOpt,
    server_ca: Path | None = ServerCaOpt,
) -> None:
    """Put HOST's replicas back on the previous tag and file, in a safe order. Exit 0 when the
    replicas reached that target (3 is a rollout that rolled back)."""
    remote(server, "rollback", {"host": host, "replica": replica, "to_tag": to_tag, "to_file": to_file,
                                "runbook": runbook, "yes": yes, "soak": soak}, as_json, server_ca)
    req = RollbackRequest(host=host, replica=replica, runbook=runbook, to_tag=to_tag, to_file=to_file, yes=yes, soak=soak)
    finish(runs.rollback(req, inventory, hooks(as_json)), as_json)
