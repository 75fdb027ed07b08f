"""`orchestrate demo`: the real rollout, against a simulated gpu02 on loopback.

The simulator and the orchestrator share a time scale (`--speed` simulated seconds per real
second), so a 50-minute cold start takes seconds while every timeout, poll interval and grace
period runs its production value. Nothing here branches the executor: only the network
(loopback URLs in a generated inventory) and the clock differ.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from orchestrator.engine.fleet import run_fleet
from orchestrator.hosts.clients.retry import RetryPolicy
from orchestrator.language.runbook import DEFAULT_RUNBOOK
from orchestrator.service.admission import new_rollout
from orchestrator.service.runner import execute
from orchestrator.service.session import Session
from orchestrator.util.clock import ScaledClock
from orchestrator.util.outcome import Outcome
from orchestrator.util.settings import Settings
from orchestrator.util.user_errors import UserError
from orchestrator_sim import SimConfig, SimFleet
from orchestrator_sim.faults import FAULTS, parse_fault

DEMO_HOST = "gpu02"
DEMO_TAG = "v0.0.300"
#: `demo --base-tier`: the base tier's runbook and tag on the simulated gpu03, gpu04, gpu23
BASE_HOSTS = ("gpu03", "gpu04", "gpu23")
BASE_RUNBOOK = "base-glm53-w4afp8"
BASE_TAG = "v0.0.310"
#: `demo --runbook NAME`: the gpu02 runbooks the demo simulates -> (gpu02's starting point, tag)
DEMO_RUNBOOKS = {
    DEFAULT_RUNBOOK: ("canary", DEMO_TAG),
    "gpu02-glm53-w4afp8-pdi2-canary": ("long-context", "v0.0.304"),  # #299: r2 at pdi 2, from #294
    "gpu02-glm53-w4afp8-qsplit-canary": ("long-context", "v0.0.305"),  # #302: r2 on the v2 image, QSPLIT, 16384 chunks
}


def check_demo_runbook(name: str, *, base_tier: bool = False) -> None:
    if name not in DEMO_RUNBOOKS:
        raise UserError(f"--runbook {name!r}: the demo simulates {', '.join(DEMO_RUNBOOKS)}")
    if base_tier and name != DEFAULT_RUNBOOK:
        raise UserError(f"--runbook {name} and --base-tier: the base tier follows {DEFAULT_RUNBOOK} only")


def list_fault_table() -> str:
    arg = {"replica": ":r1|:r2", "count": ":N", "replica-count": ":r1|:r2[:N]", "none": ""}
    rows = []
    for name, f in FAULTS.items():
        base = f.scope == "base"
        rows.append(f"{name}{arg.get(f.arg, '')}" + ("[@gpu03|@gpu04|@gpu23]  (with --base-tier)" if base else ""))
        rows.append(f"    what:   {f.symptom}")
        rows.append(f"    ends:   {f.expected_end_state}")
    return "\n".join(["orchestrate demo [--base-tier] --fault NAME (repeatable):", *rows])


def demo_settings(fleet: Any, state_dir: Path) -> Settings:
    inv = state_dir / "inventory.yaml"
    fleet.write_inventory(inv)
    t = fleet.tokens
    return Settings(
        compose_manager_token=SecretStr(t.compose_manager),
        dashboard_token=SecretStr(t.dashboard),
        model_proxy_token=SecretStr(t.model_proxy),
        inference_token=SecretStr(t.inference),
        inventory=inv,
        state_dir=state_dir,
        poll_interval=10.0,
        database_url="",
        github_api_url=fleet.urls.github,
    )


def check_faults(specs: list[str], *, base_tier: bool = False) -> None:
    """Each --fault names a fault of the simulator's table, with a valid argument, on a host the
    demo simulates: else one line."""
    hosts = ("gpu02", *BASE_HOSTS) if base_tier else ("gpu02",)
    for spec in specs:
        try:
            parsed = parse_fault(spec)
        except ValueError as exc:
            raise UserError(f"--fault {spec!r}: {exc}; `orchestrate demo --list-faults` describes them") from None
        if FAULTS[parsed.name].scope == "base" and not base_tier:
            raise UserError(f"--fault {spec!r} is a base-tier fault: add --base-tier (the demo then also rolls out gpu03, "
                            f"gpu04 and gpu23)")
        host = getattr(parsed, "host", None)
        if host is not None and host not in hosts:
            raise UserError(f"--fault {spec!r}: the demo simulates {', '.join(hosts)}, not {host}")
        if host == DEMO_HOST and FAULTS[parsed.name].scope == "base":
            raise UserError(f"--fault {spec!r}: {parsed.name} applies to the base hosts ({', '.join(BASE_HOSTS)}), "
                            f"not {DEMO_HOST}")


def run_demo(*, faults: list[str], speed: float, state_dir: Path | None, progress: Any, console: Any,
             base_tier: bool = False, runbook: str = DEFAULT_RUNBOOK) -> str:
    """gpu02's rollout on a simulated gpu02; with `base_tier`, then the base tier's fleet run
    (gpu03, gpu04, gpu23 one at a time, orchestrator/engine/fleet.py) once gpu02 is DONE."""
    state_dir = state_dir or Path(tempfile.mkdtemp(prefix="orchestrate-demo-"))
    state_dir.mkdir(parents=True, exist_ok=True)
    hosts = ("gpu02", *BASE_HOSTS) if base_tier else ("gpu02",)
    initial, tag = DEMO_RUNBOOKS[runbook]
    try:  # ORCHESTRATOR_SIM_LOG_LINES (docker's log rotation in the simulator) is read here
        config = SimConfig(speed=speed, faults=list(faults), cold_start_s=2400, hosts=hosts, initial=initial)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    with SimFleet(config) as fleet:
        settings = demo_settings(fleet, state_dir)
        clock = ScaledClock(speed)
        session = Session.open(settings, clock=clock, retry=RetryPolicy(deadline_s=600, busy_wait_s=5))
        try:
            if console is not None:
                console.print(f"simulated {', '.join(hosts)} on loopback (speed x{speed:g}); faults: {', '.join(faults) or 'none'}")
            run, rb, table = new_rollout(session, DEMO_HOST, tag, runbook)
            final = asyncio.run(execute(session, run, rb, table, progress=progress, yes=True))
            outcome = final.outcome or Outcome.HALTED
            if base_tier and final.outcome == Outcome.DONE:
                def one(host: str) -> Any:
                    if console is not None:
                        console.rule(f"base tier: {host}")
                    r, rb_, t = new_rollout(session, host, BASE_TAG, BASE_RUNBOOK)
                    return asyncio.run(execute(session, r, rb_, t, progress=progress, yes=True))

                result = run_fleet(list(BASE_HOSTS), one)
                if console is not None:
                    console.print(result.summary(BASE_TAG, BASE_RUNBOOK))
                final = result.runs[-1] if result.runs else final  # the fleet stops at its first run not DONE
                outcome = result.outcome
        finally:
            session.close()
        violations = fleet.check_invariants()
        if console is not None:
            console.print(f"journal: {settings.journal_location()}")
            console.print(f"run log: {state_dir / 'logs' / (final.run_id + '.jsonl')}")
            exe = Path(sys.argv[0]).resolve() if Path(sys.argv[0]).name == "orchestrate" else "orchestrate"
            console.print(f"inspect: ORCHESTRATOR_STATE_DIR={state_dir} ORCHESTRATOR_INVENTORY={settings.inventory} {exe} status {final.run_id}")
            if violations:
                console.print("[red]simulator invariant violations:[/red]")
                for v in violations:
                    console.print(f"  - {v}")
            else:
                console.print("simulator record: every apply followed a dry run of the same request, the env map was passed whole, services never empty")
        return outcome
