"""Team mode against the real PostgreSQL server: two `orchestrate` processes pointed at one
database cannot both roll gpu02, and a killed run is finished from another process (another
state directory, as on another machine). Skipped with a visible reason when the server is
unreachable; with ORCHESTRATOR_REQUIRE_POSTGRES=1 (as in CI) that is a failure instead."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from waiting import expire_lease

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SPEED = "3000"


def _fleet():
    from orchestrator_sim import SimConfig, SimFleet

    return SimFleet(SimConfig(speed=float(SPEED), cold_start_s=1200))


def _env(fleet, state: Path, url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    env.update(fleet.env_for_orchestrator(state / "inventory.yaml"))
    env.update({"ORCHESTRATOR_STATE_DIR": str(state), "ORCHESTRATOR_TIME_SCALE": SPEED,
                "ORCHESTRATOR_DATABASE_URL": url, "ORCHESTRATOR_LEASE_TTL": "60"})
    env.update(extra)
    return env


def _applies(fleet) -> dict[tuple[str, ...], int]:
    return dict(collections.Counter(tuple(c.body["services"]) for c in fleet.calls
                                    if c.is_compose_up and not c.body.get("dry_run")))


#: The applies of one uninterrupted gpu02 rollout (the soak relay is started once per replica).
ONE_ROLLOUT = {
    ("model-sg-glm53-w4afp8-tp4-r2",): 1, ("glm53-soak-relay",): 2, ("proxy-glm53", "dcgm-glm53"): 1,
    ("otelcol-contrib",): 1,  # force-recreated alone: only its inline config changes (docker/compose#11900)
    ("model-sg-glm53-w4afp8-tp4-r1",): 1, ("model-downloader", "nginx"): 1, ("glm53-perception-check",): 2,
}


def _cmd(crashing: bool = False) -> list[str]:
    return [sys.executable, str(HERE / "crashing_orchestrate.py")] if crashing else [sys.executable, "-m", "orchestrator.cli"]


def test_two_processes_on_one_database_cannot_both_roll_gpu02(pg_journal_url, tmp_path):
    with _fleet() as fleet:
        a, b = tmp_path / "laptop-a", tmp_path / "laptop-b"
        a.mkdir(), b.mkdir()
        args = ["rollout", "gpu02", "--tag", "v0.0.300", "--yes"]
        procs = [subprocess.Popen(_cmd() + args, env=_env(fleet, d, pg_journal_url, ORCHESTRATOR_LEASE_TTL="30"), cwd=ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for d in (a, b)]
        codes = sorted(p.wait(timeout=300) for p in procs)
        assert codes == [0, 5], [p.stderr.read()[-500:] for p in procs]
        assert _applies(fleet) == ONE_ROLLOUT, "exactly one rollout's applies reached compose-manager"
        assert fleet.check_invariants() == []


def test_a_killed_run_is_finished_from_another_machine(pg_journal_url, tmp_path):
    with _fleet() as fleet:
        laptop, other = tmp_path / "laptop", tmp_path / "other"
        laptop.mkdir(), other.mkdir()
        r = subprocess.run(_cmd(crashing=True) + ["rollout", "gpu02", "--tag", "v0.0.300", "--yes"],
                           env=_env(fleet, laptop, pg_journal_url, ORCHESTRATOR_TEST_KILL_AFTER="40"), cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == -9, r.stderr[-500:]
        runs = json.loads(subprocess.run(_cmd() + ["runs", "--json"], env=_env(fleet, other, pg_journal_url), cwd=ROOT,
                                         capture_output=True, text=True, timeout=60).stdout)
        assert runs and runs[0]["outcome"] is None
        expire_lease(pg_journal_url, "gpu02")  # the dead laptop's lease has run out
        r = subprocess.run(_cmd() + ["resume", runs[0]["run_id"], "--yes"], env=_env(fleet, other, pg_journal_url), cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout[-2000:]
        assert "took over the expired lease" in r.stdout
        assert _applies(fleet) == ONE_ROLLOUT, "no apply sent twice across the two processes"
        assert fleet.check_invariants() == []
