"""`orchestrate rollout`: one host, or a fleet (`--hosts`), through the service."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from orchestrator.cli.consoles import INTERRUPT_TOLD, err, out
from orchestrator.cli.options import (
    InventoryOpt,
    JsonOpt,
    ServerCaOpt,
    ServerOpt,
    SoakOpt,
    YesOpt,
    command_app,
    flag,
    remote,
)
from orchestrator.cli.render import finish, hooks
from orchestrator.engine.fleet import default_runbook, parse_hosts
from orchestrator.service import runs
from orchestrator.service.requests import FleetRequest, RolloutRequest
from orchestrator.util.names import DEFAULT_RUNBOOK
from orchestrator.util.outcome import Outcome
from orchestrator.util.text import shown
from orchestrator.util.user_errors import UserError

app = command_app()


@app.command()
def rollout(
    host: str | None = typer.Argument(None, metavar="[HOST]", help="Host name from the inventory, e.g. gpu02 (or --hosts)"),
    tag: str = typer.Option(..., "--tag", metavar="TAG", help="compose-files tag to roll out (v0.0.N), e.g. v0.0.300"),
    runbook: str | None = typer.Option(None, "--runbook", metavar="NAME|PATH",
                                          help="Runbook: a name shipped in runbooks/, or a path to a runbook "
                                               "YAML. Default: the shipped runbook that names HOST (all of --hosts), else "
                                               f"{DEFAULT_RUNBOOK}"),
    yes: bool = YesOpt,
    soak: str | None = SoakOpt,
    as_json: bool = JsonOpt,
    inventory: Path | None = InventoryOpt,
    server: str | None = ServerOpt,
    server_ca: Path | None = ServerCaOpt,
    continue_: bool = flag("--continue", "The host is part-way (e.g. r2 moved, r1 not): continue from the phase its state "
                           "names, after checking it (read-only) against the runbook's host states"),
    skip_tag_age_check: bool = flag("--skip-tag-age-check", "Go on when GitHub cannot be reached to check that the tag is "
                                    "merged and old enough (journaled in the run)"),
    hosts: str | None = typer.Option(None, "--hosts", metavar="H1,H2,...",
                                        help="A fleet run: these hosts one at a time, in this order, each after the previous "
                                             "one ended DONE (its soak passed and was approved); stops at the first that does not"),
    override_prerequisite: list[str] = typer.Option([], "--override-prerequisite", metavar="HOST",
                                                    help="Go on although the runbook's prerequisite on HOST (its run DONE and "
                                                         "soaked) does not hold; by name only, journaled (repeatable)"),
) -> None:
    """Roll HOST (or --hosts, one at a time) to TAG following the runbook, gate by gate, rolling back at a failed gate."""
    if hosts is not None:
        if host is not None:
            raise UserError("give HOST or --hosts, not both")
        if continue_:
            raise UserError("--continue places one host: `orchestrate rollout HOST --continue` for the host that stopped; "
                            "then the fleet command again (hosts at the target end DONE with nothing sent)")
        if server:
            raise UserError("--hosts runs here, not through --server: run the fleet on the machine that holds the journal")
        runs.check_fleet_options(tag, soak)
        done = runs.fleet(FleetRequest(hosts=tuple(parse_hosts(hosts)), tag=tag, runbook=runbook, yes=yes, soak=soak,
                                       skip_tag_age_check=skip_tag_age_check, overrides=tuple(override_prerequisite)),
                          inventory, hooks(as_json))
        result = done.result
        text = result.summary(tag, done.runbook)
        if as_json:
            sys.stdout.write(json.dumps({"event": "fleet_summary", "outcome": str(result.outcome), "hosts": done.hosts,
                                         "runs": [r.run_id for r in result.runs], "stopped_at": result.stopped_at,
                                         "not_started": result.not_started, "message": text}) + "\n")
        else:
            (out if result.outcome == Outcome.DONE else err).print(shown(text), markup=False)
        if result.interrupted is not None:
            INTERRUPT_TOLD.append(True)
        raise typer.Exit(done.exit_code)
    if host is None:
        raise UserError("give a HOST (e.g. gpu02), or --hosts gpu03,gpu04,gpu23 for a fleet run")
    if runbook is None:
        runbook = default_runbook(host)
    if server:
        local_only = [f for f, on in (("--continue", continue_), ("--skip-tag-age-check", skip_tag_age_check),
                                      ("--override-prerequisite", bool(override_prerequisite))) if on]
        if local_only:  # never drop an operator's flag on the way to the server
            raise UserError(f"{', '.join(local_only)} runs here only, not through --server: run it on the machine that "
                            f"holds the journal")
        remote(server, "rollout", {"host": host, "tag": tag, "runbook": runbook, "yes": yes, "soak": soak}, as_json,
               server_ca)
    req = RolloutRequest(host=host, tag=tag, runbook=runbook, yes=yes, soak=soak, continue_=continue_,
                         skip_tag_age_check=skip_tag_age_check, overrides=tuple(override_prerequisite))
    finish(runs.rollout(req, inventory, hooks(as_json)), as_json)

