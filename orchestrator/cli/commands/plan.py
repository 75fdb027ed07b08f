"""`orchestrate plan`: the offline (or `--live`, read-only) preview of a run."""

from __future__ import annotations

import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import typer

from orchestrator.cli.consoles import err
from orchestrator.cli.options import InventoryOpt, command_app
from orchestrator.engine.fleet import parse_hosts, runbook_for
from orchestrator.hosts.inventory import load_inventory
from orchestrator.language.machine import compile_rollback, compile_rollout
from orchestrator.language.runbook import default_runbook, load_runbook
from orchestrator.previews.compose_check import check_against_compose_file, read_env_file
from orchestrator.previews.diagram import render_dot, render_mermaid
from orchestrator.previews.plan import build_plan, fleet_rules, render_json, render_markdown, render_text
from orchestrator.service.reads import load_settings_for
from orchestrator.service.run_info import check_tag
from orchestrator.util.exit_codes import ExitCode
from orchestrator.util.names import DEFAULT_RUNBOOK
from orchestrator.util.user_errors import UserError

app = command_app()


@app.command()
def plan(
    host: str | None = typer.Argument(None, metavar="[HOST]", help="Host name from the inventory, e.g. gpu02 (or --hosts)"),
    tag: str = typer.Option(..., "--tag", metavar="TAG", help="compose-files tag to roll out, e.g. v0.0.300"),
    runbook: str | None = typer.Option(None, "--runbook", metavar="NAME|PATH",
                                          help="Runbook (default: the shipped runbook that names HOST, all of --hosts, "
                                               f"else {DEFAULT_RUNBOOK})"),
    fmt: str = typer.Option("text", "--format", metavar="text|markdown|json|mermaid|dot",
                            help="Output format (mermaid, dot: the state diagram drawn from the transition table)"),
    compose_file: Path | None = typer.Option(None, "--compose-file", metavar="PATH",
                                                help="Check the runbook against this compose file (the new file); exit 1 on a mismatch"),
    env_file: Path | None = typer.Option(None, "--env", metavar="FILE",
                                            help="With --compose-file: interpolate it with a host's env map (a dotenv "
                                                 "file; values are never printed) instead of the file's own defaults"),
    rollback: str | None = typer.Option(None, "--rollback", metavar="r1|r2|all", help="Plan a standalone rollback instead"),
    inventory: Path | None = InventoryOpt,
    live: bool = typer.Option(False, "--live", help="Read the host (never change it): env map keys, budget, host state, "
                              "rollback targets, GPUs, model cache, dry runs; ends with a verdict (exit 0, or 5 would refuse)"),
    hosts: str | None = typer.Option(None, "--hosts", metavar="H1,H2,...",
                                        help="Plan a fleet run: the host order and the rules between hosts, then the steps"),
) -> None:
    """Preview every step, request, gate and rollback transition. Offline: never contacts a host
    (needs the inventory only to check HOST exists and name its compose project), unless --live:
    then read-only against the host (no down, no up without dry_run)."""
    check_tag(tag)
    if fmt not in ("text", "markdown", "json", "mermaid", "dot"):
        raise UserError(f"--format {fmt!r} is not one of text, markdown, json, mermaid, dot")
    fleet: list[str] = []
    if hosts is not None:
        if host is not None:
            raise UserError("give HOST or --hosts, not both")
        if live or rollback is not None:
            raise UserError("--hosts plans a fleet rollout offline: --live and --rollback take one HOST")
        fleet = parse_hosts(hosts)
        host = fleet[0]
    if host is None:
        raise UserError("give a HOST (e.g. gpu02), or --hosts gpu03,gpu04,gpu23 for a fleet run")
    settings = load_settings_for(inventory)
    if live:
        if rollback is not None:
            raise UserError("--live previews a rollout; --rollback plans are offline only")
        if runbook is None:
            runbook = default_runbook(host)
        _plan_live(settings, host, tag, runbook, fmt, compose_file, env_file)
        return
    inv = load_inventory(settings.inventory_path())
    for h in fleet:
        inv.host(h)  # an unknown host is named before any runbook is chosen
    if runbook is None:
        runbook = runbook_for(fleet, None).name if fleet else default_runbook(host)
    entry = inv.host(host)
    rb = load_runbook(runbook)
    for h in fleet or [host]:
        if h not in rb.hosts:
            raise UserError(f"runbook {rb.name} is written for {', '.join(rb.hosts)}, not {h}")
        problem = rb.inventory_problem(h, inv.hosts, inv.host(h).prometheus_url is not None)
        if problem is not None:  # a gate that could only fail at run time
            raise UserError(problem)
    table = compile_rollout(rb) if rollback is None else compile_rollback(rb, rb.rollback_replicas(rollback, "--rollback"))
    checks, problems, new_services = _check_file(rb, compose_file, env_file)
    if fmt in ("mermaid", "dot"):  # the state diagram, generated from the same table (orchestrator/previews/diagram.py)
        sys.stdout.write((render_mermaid if fmt == "mermaid" else render_dot)(table))
        return
    p = build_plan(rb, table, host=host, tag=tag, project=entry.project, new_file_services=new_services)
    p.checks, p.problems = checks, problems
    if fleet:
        p.fleet, p.fleet_rules = fleet, fleet_rules(rb, fleet)
    sys.stdout.write({"text": render_text, "markdown": render_markdown, "json": render_json}[fmt](p))
    if problems:
        for pr in problems:
            err.print(f"mismatch: {pr}")
        raise typer.Exit(int(ExitCode.UNEXPECTED))


def _check_file(rb: Any, compose_file: Path | None, env_file: Path | None) -> tuple[list[str], list[str], set[str] | None]:
    """(checks, problems, services the new file defines) of --compose-file, when it is given."""
    if compose_file is None:
        return [], [], None
    return check_against_compose_file(rb, compose_file, env=read_env_file(env_file))


def _plan_live(settings: Any, host: str, tag: str, runbook: str, fmt: str, compose_file: Path | None,
               env_file: Path | None) -> None:
    """`plan --live`: orchestrator.previews.live_plan, with the inventory's tokens from the settings."""
    # imported here: an offline plan never talks to a host and does without them (~0.5 s of start-up)
    import asyncio

    from orchestrator.engine.run_logs import ensure_configured
    from orchestrator.previews.live_plan import (
        build_live_plan,
        render_live_json,
        render_live_markdown,
        render_live_text,
    )
    from orchestrator.service.oncall import refuse_placeholder_inventory
    from orchestrator.service.refusals import refuse_if_leased
    from orchestrator.service.session import Session

    if fmt not in ("text", "markdown", "json"):
        raise UserError(f"--live shows text, markdown, json, not {fmt!r} (the state diagram needs no host: drop --live)")
    ensure_configured()  # client log events are dropped: stdout holds the plan only
    refuse_placeholder_inventory(settings, host)  # its URLs never resolve: say so now, not after the retries
    unset = [name for name, tok in (("ORCHESTRATOR_COMPOSE_MANAGER_TOKEN", settings.compose_manager_token),
                                    ("ORCHESTRATOR_DASHBOARD_TOKEN", settings.dashboard_token)) if not tok.get_secret_value()]
    if unset:
        raise UserError(f"plan --live reads the host: set {' and '.join(unset)} (the inventory's tokens)")
    checks, problems, new_services = _check_file(load_runbook(runbook) if compose_file is not None else None,
                                                 compose_file, env_file)
    with closing(Session.open(settings)) as session:
        # another run's compose calls would meet the preview's dry runs (409) and the preview theirs
        refuse_if_leased(session, host, "plan --live sends dry runs and reads nothing while a run holds the host")
        lp = asyncio.run(build_live_plan(session, host, tag, runbook, new_file_services=new_services))
    lp.plan.checks, lp.plan.problems = checks, problems
    sys.stdout.write({"text": render_live_text, "markdown": render_live_markdown, "json": render_live_json}[fmt](lp))
    for pr in problems:
        err.print(f"mismatch: {pr}")
    if lp.changed:  # never a silent "nothing was changed": one line naming what changed
        err.print(f"orchestrate: the preview changed real containers: {'; '.join(lp.changed)}", markup=False, soft_wrap=True)
    raise typer.Exit(int(ExitCode.UNEXPECTED) if problems else lp.exit_code)
