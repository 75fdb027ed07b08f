"""`orchestrate demo`: a full rollout against the built-in simulator (orchestrator/service/demo.py)."""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path

import typer
from rich.console import Console

from orchestrator.cli.consoles import INTERRUPT_TOLD, err, out
from orchestrator.cli.options import command_app, flag
from orchestrator.cli.render import progress
from orchestrator.service.demo import check_faults, demo_hosts, demo_target, list_fault_table, run_demo
from orchestrator.service.oncall import demo_interrupted
from orchestrator.util.exit_codes import INTERRUPTED_EXIT, OUTCOME_EXIT, ExitCode
from orchestrator.util.settings import load_settings
from orchestrator.util.user_errors import UserError

app = command_app()


@app.command()
def demo(
    fault: list[str] = typer.Option([], "--fault", metavar="NAME[:ARG]",
                                    help="Inject a named fault into the simulator (repeatable); see --list-faults"),
    speed: float = typer.Option(600.0, "--speed", metavar="X", help="Simulated seconds per real second (> 0)"),
    list_faults: bool = flag("--list-faults", "List the faults, their symptom and the run's expected end, and exit"),
    state_dir: Path | None = typer.Option(None, "--state-dir", metavar="DIR",
                                             help="Where the demo's journal and logs go (default: a new temporary directory)"),
    as_json: bool = flag("--json", "Machine output: one JSON object per line on stdout, {\"event\": KIND, ...} for each "
                                   "event; no summary line (the exit code is the outcome)"),
    base_tier: bool = flag("--base-tier", "Then the base tier: gpu03, gpu04, gpu23 one at a time (a fleet run), once "
                                          "gpu02 is DONE"),
    runbook: str | None = typer.Option(None, "--runbook", metavar="NAME|PATH",
                                          help="The runbook to rehearse: a shipped one (e.g. gpu02-glm53-w4afp8-pdi2-canary: "
                                               "the simulated gpu02 starts as #294 left it) or any runbook file whose hosts "
                                               "the simulator stands up (gpu02, gpu03, gpu04, gpu23)"),
    tag: str | None = typer.Option(None, "--tag", metavar="TAG",
                                      help="With --runbook: the simulated tag to roll out (default: the one the shipped "
                                           "runbook is rehearsed at, else the newest that holds its file and is old enough)"),
) -> None:
    """A full rollout against built-in simulated hosts (no infrastructure needed): gpu02's by
    default, or the --runbook's on its hosts."""
    if list_faults:
        out.print(list_fault_table(), markup=False)
        return
    if not (math.isfinite(speed) and speed > 0):
        raise UserError(f"--speed {speed:g} must be a positive number of simulated seconds per real second (e.g. 600)")
    if tag is not None and runbook is None:
        raise UserError("--tag picks the tag of a --runbook's rehearsal: add --runbook")
    target = demo_target(runbook, tag, base_tier=base_tier)
    check_faults(fault, demo_hosts(target, base_tier=base_tier))
    load_settings()  # an invalid ORCHESTRATOR_* variable: one line now, not a traceback later
    if state_dir is None:  # made here, so that a Ctrl-C can say where the demo's journal is
        state_dir = Path(tempfile.mkdtemp(prefix="orchestrate-demo-"))
    try:
        outcome = run_demo(faults=fault, speed=speed, state_dir=state_dir, progress=progress(as_json),
                           console=Console(quiet=True) if as_json else out, base_tier=base_tier, target=target)
    except KeyboardInterrupt:
        sys.stdout.flush()
        err.print(f"orchestrate: {demo_interrupted(state_dir)}", markup=False)
        INTERRUPT_TOLD.append(True)
        raise typer.Exit(INTERRUPTED_EXIT) from None
    raise typer.Exit(int(OUTCOME_EXIT.get(outcome, ExitCode.UNEXPECTED)))
