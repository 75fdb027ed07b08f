"""`orchestrate ci-preview`: the compose-files repository's CI check."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from orchestrator.cli.consoles import err
from orchestrator.cli.options import command_app
from orchestrator.previews import ci_preview as ci
from orchestrator.previews.compose_check import read_env_file
from orchestrator.util.exit_codes import ExitCode

app = command_app()


@app.command("ci-preview")
def ci_preview(
    changed: list[str] = typer.Option([], "--changed", help="A changed file, relative to the repository root (repeatable)"),
    repo: Path = typer.Option(Path("."), "--repo", help="The compose-files checkout the changed files are read from"),
    inventory: Path | None = typer.Option(None, "--inventory", help="Optional host inventory (for each host's compose project)"),
    summary: Path | None = typer.Option(None, "--summary", help="Append the markdown here too (e.g. $GITHUB_STEP_SUMMARY)"),
    env_file: Path | None = typer.Option(None, "--env", metavar="FILE",
                                            help="Interpolate the files with a host's env map (a dotenv file; values "
                                                 "are never printed) instead of their own defaults"),
    base_ref: str | None = typer.Option(None, "--base-ref", metavar="REF",
                                           help="A git ref of --repo (the pull request's merge base): show per service "
                                                "what the rollout will recreate, and fail a change the runbook does not "
                                                "stop or recreate"),
) -> None:
    """CI for the compose-files repository: the offline plan of every runbook a changed file affects,
    as markdown; exit 1 when a changed file no longer matches a runbook that deploys it."""
    md, failures = ci.preview(changed, ci.check_repo(repo), projects=ci.inventory_projects(inventory),
                              env=read_env_file(env_file), base_ref=base_ref)
    sys.stdout.write(md)
    if summary is not None:
        with summary.open("a", encoding="utf-8") as fh:
            fh.write(md)
    for f in failures:
        err.print(f"mismatch: {f}")
    raise typer.Exit(int(ExitCode.UNEXPECTED) if failures else 0)
