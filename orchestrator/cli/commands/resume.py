"""`orchestrate resume`: continue a run (or `--retry` a halted rollout's phase), through the service."""

from __future__ import annotations

from pathlib import Path

from orchestrator.cli.options import (
    InventoryOpt,
    JsonOpt,
    RunIdArg,
    ServerCaOpt,
    ServerOpt,
    SoakOpt,
    YesOpt,
    command_app,
    flag,
    remote,
)
from orchestrator.cli.render import finish, hooks
from orchestrator.service import runs
from orchestrator.service.requests import ResumeRequest

app = command_app()


@app.command()
def resume(
    run_id: str = RunIdArg,
    retry: bool = flag("--retry", "A halted rollout: start its failed phase again (as a new run)"),
    yes: bool = YesOpt,
    soak: str | None = SoakOpt,
    as_json: bool = JsonOpt,
    inventory: Path | None = InventoryOpt,
    server: str | None = ServerOpt,
    server_ca: Path | None = ServerCaOpt,
) -> None:
    """Continue a run after a crash or Ctrl-C (no mutating call whose outcome is journaled is sent again)."""
    remote(server, "resume", {"run_id": run_id, "retry": retry, "yes": yes, "soak": soak}, as_json, server_ca)
    finish(runs.resume(ResumeRequest(run_id=run_id, retry=retry, yes=yes, soak=soak), inventory, hooks(as_json)), as_json)
