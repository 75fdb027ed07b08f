"""Crash tests: the orchestrator process is SIGKILLed right after a journal write, then
`orchestrate resume` (a new process) finishes the run. The end state must equal an uninterrupted
run's, no mutating call may reach compose-manager more often than in the uninterrupted run, and
the simulator's invariants hold (for a base host: drained before any engine stops, the other base
hosts carrying the domain).

Two rollouts: gpu02's long-context one, and a base host's (gpu03, among gpu04 and gpu23). By
default a representative set of kill points runs for each (gpu02: the intent and the outcome of
the first down, the r2 apply, the sidecars apply and the r1 apply; gpu03: of the drain, the stop of
both FP8 engines, the W4AFP8 apply and the rejoin; and a transition); set ORCHESTRATOR_CRASH_ALL=1
to kill after every journal write of both entire rollouts."""

from __future__ import annotations

import collections
import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from waiting import expire_lease

pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SPEED = "3000"


def _env(fleet, state: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    env.update(fleet.env_for_orchestrator(state / "inventory.yaml"))
    env.update({"ORCHESTRATOR_STATE_DIR": str(state), "ORCHESTRATOR_TIME_SCALE": SPEED, "ORCHESTRATOR_LEASE_TTL": "60"})
    env.update(extra)
    return env


def _orchestrate(args, env, *, crashing=False):
    cmd = [sys.executable, str(HERE / "crashing_orchestrate.py")] if crashing else [sys.executable, "-m", "orchestrator.cli"]
    return subprocess.run(cmd + list(args), env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)


#: what is rolled out, on which simulated hosts, and which mutating intents are representative
TARGETS = {
    "gpu02": {"hosts": ("gpu02",), "host": "gpu02", "args": ["rollout", "gpu02", "--tag", "v0.0.300", "--yes"],
              # first down, r2 apply, sidecars, r1 apply (ordered as the runbook runs them)
              "intents": (0, 2, 4, 7)},
    "gpu03": {"hosts": ("gpu03", "gpu04", "gpu23"), "host": "gpu03",
              "args": ["rollout", "gpu03", "--tag", "v0.0.310", "--yes", "--soak", "0", "--override-prerequisite", "gpu02"],
              # downloader up (0), the drain (1), stop of both FP8 engines (4), the W4AFP8 apply (5), the rejoin (10)
              "intents": (1, 4, 5, 10)},
}


def _mutating(fleet, host: str) -> collections.Counter:
    out: collections.Counter = collections.Counter()
    for c in fleet.calls:
        if c.host == host and ((c.is_compose_up and not c.body.get("dry_run")) or c.is_compose_down):
            out[(c.path, c.body["tag"], c.body["file"], tuple(c.body["services"]))] += 1
    return out


def _end_state(fleet, host: str) -> dict[str, tuple[str, str]]:
    return {c.service: (c.file, c.state) for c in fleet.hosts[host].containers() if c.state in ("running", "restarting")}


def _fleet(target: str):
    from orchestrator_sim import SimConfig, SimFleet

    return SimFleet(SimConfig(speed=float(SPEED), cold_start_s=1200, hosts=TARGETS[target]["hosts"]))


def _baseline(target_name: str, state: Path) -> dict:
    target = TARGETS[target_name]
    log = state / "writes.log"
    with _fleet(target_name) as fleet:
        r = _orchestrate(target["args"],
                         _env(fleet, state, ORCHESTRATOR_TEST_KILL_AFTER="0", ORCHESTRATOR_TEST_WRITE_LOG=str(log)), crashing=True)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        return {"target": target_name, "writes": [ln.split() for ln in log.read_text().splitlines()],
                "mutating": [[list(req), n] for req, n in _mutating(fleet, target["host"]).items()],
                "end": _end_state(fleet, target["host"])}


@pytest.fixture(scope="module", params=sorted(TARGETS))
def baseline(request, tmp_path_factory):
    """One uninterrupted rollout per target, with every journal write logged (never killed), run
    once per test session: under xdist the first worker to need a target's baseline runs it and the
    others read its file (pytest-xdist's lock-and-share recipe), so no worker repeats the rollout."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        shared = tmp_path_factory.getbasetemp().parent
        with open(shared / f"crash-baseline-{request.param}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            done = shared / f"crash-baseline-{request.param}.json"
            if not done.exists():
                done.write_text(json.dumps(_baseline(request.param, tmp_path_factory.mktemp(f"baseline-{request.param}"))))
            data = json.loads(done.read_text())
    else:
        data = json.loads(json.dumps(_baseline(request.param, tmp_path_factory.mktemp(f"baseline-{request.param}"))))
    data["mutating"] = collections.Counter({tuple(tuple(x) if isinstance(x, list) else x for x in req): n
                                            for req, n in data["mutating"]})
    data["end"] = {service: tuple(v) for service, v in data["end"].items()}
    return data


def _kill_points(writes, intents_at=(0, 2, 4, 7)) -> list[int]:
    if os.environ.get("ORCHESTRATOR_CRASH_ALL") == "1":
        return list(range(1, len(writes) + 1))
    points: list[int] = []
    intents = [i for i, w in enumerate(writes) if w[1] == "record_intent" and w[-1] == "True"]
    for nth in intents_at:
        if nth < len(intents):
            i = intents[nth]
            points += [i + 1, i + 2]  # right after the intent (call not sent) and after its outcome
    transitions = [i for i, w in enumerate(writes) if w[1] == "record_transition"]
    points.append(transitions[len(transitions) // 2] + 1)
    return sorted(set(points))


def test_kill_points_exist(baseline):
    assert len(_kill_points(baseline["writes"], TARGETS[baseline["target"]]["intents"])) >= 5


@pytest.mark.parametrize("slot", range(9))
def test_sigkill_then_resume_reaches_the_same_end_without_duplicate_mutations(baseline, tmp_path, slot):
    name = baseline["target"]
    target = TARGETS[name]
    points = _kill_points(baseline["writes"], target["intents"])
    if os.environ.get("ORCHESTRATOR_CRASH_ALL") == "1":
        chosen = points[slot::9]  # every write, shared out over the 9 slots (parallel under -n)
    elif slot < len(points):
        chosen = [points[slot]]
    else:
        pytest.skip("fewer kill points than slots")
    for k in chosen:
        state = tmp_path / f"k{k}"
        state.mkdir()
        with _fleet(name) as fleet:
            r = _orchestrate(target["args"], _env(fleet, state, ORCHESTRATOR_TEST_KILL_AFTER=str(k)), crashing=True)
            assert r.returncode == -9, f"kill point {k}: {r.returncode} {r.stderr[-500:]}"
            runs = json.loads(_orchestrate(["runs", "--json"], _env(fleet, state)).stdout)
            run_id = runs[0]["run_id"]
            expire_lease(str(state / "journal.sqlite3"), target["host"])  # the killed runner's lease has run out
            r2 = _orchestrate(["resume", run_id, "--yes"], _env(fleet, state))
            assert r2.returncode == 0, f"kill point {k}: resume exit {r2.returncode}\n{r2.stdout[-3000:]}\n{r2.stderr[-1000:]}"
            assert _end_state(fleet, target["host"]) == baseline["end"], f"kill point {k}"
            got = _mutating(fleet, target["host"])
            extra = {req: n for req, n in got.items() if n > baseline["mutating"].get(req, 0)}
            assert extra == {}, f"kill point {k}: mutating calls sent more often than in an uninterrupted run: {extra}"
            assert fleet.check_invariants() == []
