"""`orchestrate demo`: the real rollout against simulated hosts on loopback. The simulator and the
orchestrator share a time scale (`--speed`): a 50-minute cold start takes seconds while every
timeout runs its production value. Only the network (a generated inventory) and the clock differ.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from orchestrator.engine.fleet import run_fleet
from orchestrator.engine.progress import Progress
from orchestrator.hosts.clients.retry import RetryPolicy
from orchestrator.language.runbook import (
    DEFAULT_RUNBOOK,
    RUNBOOK_DIR,
    load_runbook,
    resolve_runbook_path,
    runbook_names,
)
from orchestrator.service.admission import new_rollout
from orchestrator.service.runner import execute_stoppable, exit_at_once
from orchestrator.service.session import Session
from orchestrator.util.clock import ScaledClock
from orchestrator.util.outcome import Outcome
from orchestrator.util.settings import Settings
from orchestrator.util.user_errors import UserError
from orchestrator_sim import KNOWN_HOSTS, SimConfig, SimFleet, SimRepository
from orchestrator_sim.faults import FAULTS, parse_fault

DEMO_HOST = "gpu02"
DEMO_TAG = "v0.0.300"
#: `demo --base-tier`: the base tier's runbook and tag on the simulated gpu03, gpu04, gpu23
BASE_HOSTS = ("gpu03", "gpu04", "gpu23")
BASE_RUNBOOK = "base-glm53-w4afp8"
BASE_TAG = "v0.0.310"
#: `demo --runbook NAME`: the shipped gpu02 runbooks -> (gpu02's starting point, the tag the simulator holds for them)
DEMO_RUNBOOKS = {
    DEFAULT_RUNBOOK: ("canary", DEMO_TAG),
    "gpu02-glm53-w4afp8-pdi2-canary": ("long-context", "v0.0.304"),  # #299: r2 at pdi 2, from #294
    "gpu02-glm53-w4afp8-qsplit-canary": ("long-context", "v0.0.305"),  # #302: r2 on the v2 image, QSPLIT, 16384 chunks
}


@dataclass(frozen=True)
class DemoTarget:
    """What a demo rehearses: the runbook, its hosts in order (several: a fleet run), the tag and
    gpu02's starting point."""

    runbook: str
    hosts: tuple[str, ...]
    tag: str
    initial: str


def demo_target(runbook: str | None = None, tag: str | None = None, *, base_tier: bool = False) -> DemoTarget:
    """A shipped gpu02 runbook at the tag the simulator holds for it, or a runbook file whose hosts
    the simulator stands up at `tag` (else the newest simulated tag holding its file and old
    enough). gpu02 starts as the canary left it when the runbook `deploys:` its file, else as #294."""
    name = runbook or DEFAULT_RUNBOOK
    if base_tier and name != DEFAULT_RUNBOOK:
        raise UserError(f"--runbook {name} and --base-tier: the base tier follows {DEFAULT_RUNBOOK} only")
    repo = SimRepository.load()
    try:
        path = resolve_runbook_path(name).resolve()
    except UserError:
        raise UserError(f"--runbook {name!r}: the demo simulates a shipped runbook ({', '.join(runbook_names())}) or "
                        f"a runbook file (.yaml) whose hosts it stands up ({', '.join(KNOWN_HOSTS)})") from None
    shipped = path.stem if path.parent == RUNBOOK_DIR.resolve() else None
    if shipped in DEMO_RUNBOOKS and tag is None:  # by name or by its path in runbooks/
        initial, known = DEMO_RUNBOOKS[shipped]
        return DemoTarget(name, (DEMO_HOST,), known, initial)
    rb = load_runbook(name)
    unknown = [h for h in rb.hosts if h not in KNOWN_HOSTS]
    if unknown:
        raise UserError(f"--runbook {name}: written for {', '.join(rb.hosts)}; the simulator stands up "
                        f"{', '.join(KNOWN_HOSTS)}, not {', '.join(unknown)}")
    holding = [t for t in repo.tags.values() if rb.file in t.files]
    if tag is None:
        old_enough = [t for t in holding if t.age_hours >= repo.min_tag_age_hours]
        if not old_enough:
            raise UserError(f"--runbook {name}: no simulated tag holds {rb.file} and clears the "
                            f"{repo.min_tag_age_hours:g} h tag-age gate")
        tag = max(old_enough, key=lambda t: tuple(int(x) for x in re.findall(r"\d+", t.name))).name
    elif tag not in [t.name for t in holding]:
        raise UserError(f"--tag {tag}: the simulated repository holds {rb.file} at "
                        f"{', '.join(t.name for t in holding) or 'no tag'}")
    initial = "canary" if {a.file for a in repo.initial_actions} & set(rb.deploys) else "long-context"
    return DemoTarget(name, tuple(rb.hosts), tag, initial)


class DemoOperator:
    """The human a `manual:` step needs: when the run reaches one, the simulated dashboard gets the
    edit its verification describes (the run still approves and verifies it). Events go on to `inner`."""

    def __init__(self, fleet: Any, runbook: Any, host: str, inner: Progress | None = None) -> None:
        self.fleet, self.host, self.inner = fleet, host, inner
        self.edits = {s.id: s.manual.verify.env for steps in runbook.step_lists() for s in steps if s.manual is not None}

    def event(self, kind: str, **fields: Any) -> None:
        if self.inner is not None:
            self.inner.event(kind, **fields)
        env = self.edits.get(str(fields.get("state", "")).rsplit(".", 1)[-1]) if kind == "step_started" else None
        if env is None:
            return
        host = self.host if env.host == "this" else env.host
        for key, value in env.equals.items():
            self.fleet.set_env_var(key, value, host=host)
        for key in env.absent:
            self.fleet.set_env_var(key, None, host=host)


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
    return Settings(compose_manager_token=SecretStr(t.compose_manager), dashboard_token=SecretStr(t.dashboard),
                    model_proxy_token=SecretStr(t.model_proxy), inference_token=SecretStr(t.inference), inventory=inv,
                    state_dir=state_dir, poll_interval=10.0, database_url="", github_api_url=fleet.urls.github)


def demo_hosts(target: DemoTarget, *, base_tier: bool = False) -> tuple[str, ...]:
    return (*target.hosts, *BASE_HOSTS) if base_tier else target.hosts


def check_faults(specs: list[str], hosts: tuple[str, ...]) -> None:
    """Each --fault is a fault of the simulator's table, on a host the demo simulates: else one line."""
    for spec in specs:
        try:
            parsed = parse_fault(spec)
        except ValueError as exc:
            raise UserError(f"--fault {spec!r}: {exc}; `orchestrate demo --list-faults` describes them") from None
        if FAULTS[parsed.name].scope == "base" and not any(h in BASE_HOSTS for h in hosts):
            raise UserError(f"--fault {spec!r} is a base-tier fault: add --base-tier (the demo then also rolls out gpu03, "
                            f"gpu04 and gpu23)")
        host = getattr(parsed, "host", None)
        if host is not None and host not in hosts:
            raise UserError(f"--fault {spec!r}: the demo simulates {', '.join(hosts)}, not {host}")
        if host == DEMO_HOST and FAULTS[parsed.name].scope == "base":
            raise UserError(f"--fault {spec!r}: {parsed.name} applies to the base hosts ({', '.join(BASE_HOSTS)}), "
                            f"not {DEMO_HOST}")


def _demo_hard_stop(run: Any, signame: str) -> None:
    """A second Ctrl-C: the demo exits at once (its simulated hosts go with it; nothing to resume)."""
    exit_at_once(run, signame, f"the demo exits at once (run {run.run_id}); nothing real was touched")


def run_demo(*, faults: list[str], speed: float, state_dir: Path, progress: Any, console: Any,
             base_tier: bool, target: DemoTarget) -> str:
    """The target's rollout on its simulated hosts (a fleet run for several); with `base_tier`, then
    the base tier's fleet run once gpu02 is DONE. Returns the outcome (`console`: quiet for --json)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    hosts = demo_hosts(target, base_tier=base_tier)
    try:  # ORCHESTRATOR_SIM_LOG_LINES (docker's log rotation in the simulator) is read here
        config = SimConfig(speed=speed, faults=list(faults), cold_start_s=2400, hosts=hosts, initial=target.initial)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    with SimFleet(config) as fleet:
        settings = demo_settings(fleet, state_dir)
        with closing(Session.open(settings, clock=ScaledClock(speed), retry=RetryPolicy(deadline_s=600, busy_wait_s=5))) as session:
            console.print(f"simulated {', '.join(hosts)} on loopback (speed x{speed:g}); runbook {target.runbook} at "
                          f"{target.tag}; faults: {', '.join(faults) or 'none'}")

            def rollout(runbook_: str, tag: str, title: str) -> Callable[[str], Any]:
                def one(host: str) -> Any:
                    if title:
                        console.rule(f"{title}{host}")
                    r, rb_, t = new_rollout(session, host, tag, runbook_)
                    operator = DemoOperator(fleet, rb_, host, inner=progress)
                    final, stopped_by = execute_stoppable(session, r, rb_, t, progress=operator, yes=True,
                                                          hard_stop=_demo_hard_stop)
                    if stopped_by is not None:  # Ctrl-C (or SIGTERM): the command says where the run was
                        raise KeyboardInterrupt
                    return final
                return one

            if len(target.hosts) == 1:  # refused before it starts: the UserError's one line
                final = rollout(target.runbook, target.tag, "")(target.hosts[0])
                outcome = final.outcome or Outcome.HALTED
            else:
                result = run_fleet(list(target.hosts), rollout(target.runbook, target.tag, "fleet: "))
                console.print(result.summary(target.tag, target.runbook))
                if not result.runs:
                    raise UserError(result.summary(target.tag, target.runbook))
                final, outcome = result.runs[-1], result.outcome
            if base_tier and final.outcome == Outcome.DONE:
                result = run_fleet(list(BASE_HOSTS), rollout(BASE_RUNBOOK, BASE_TAG, "base tier: "))
                console.print(result.summary(BASE_TAG, BASE_RUNBOOK))
                final = result.runs[-1] if result.runs else final  # the fleet stops at its first run not DONE
                outcome = result.outcome
        violations = fleet.check_invariants()
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
