"""Issue 21, cases 12 and 13, end to end against the simulator.

12 - scoped dry runs: on a host with docker/compose#14029 (fault `dry-run-recreates`: a dry run
     that needs a recreate performs the real `up -d --remove-orphans`), neither the preflight's
     placement nor `plan --live` may name the serving r1 (that recreated r1 and orphan-removed the
     old r2: nothing served); docker/ps is compared around every dry run and a change stops the
     run with one line naming the container; a preview never says "nothing was changed" when
     something was.
13 - foreign changes: two state directories (one working directory's `.env` sets
     ORCHESTRATOR_STATE_DIR) give two journals that never see each other's lease. The second
     rollout must not call the first one's host "part-way, run --continue" (nor blame compose),
     and a call the running rollout did not make (a person with curl) stops it before its next
     mutating call, naming the call, with nothing rolled back.

Each test fails on 77b15ae.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from waiting import wait_until

from orchestrator.language.runbook import DEFAULT_RUNBOOK

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SPEED = "3000"
TAG = "v0.0.300"
R1 = "model-sg-glm53-w4afp8-tp4-r1"
R2_NEW = "model-sg-glm53-w4afp8-tp4-r2"
R2_OLD = "model-sg-glm53-fp8-tp4-r2"
RELAY = "glm53-soak-relay"
NEW_FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"


def _running(fleet):
    return {c.service: c for c in fleet.host.containers() if c.state in ("running", "restarting")}


def _ids(fleet):
    return {s: c.id for s, c in _running(fleet).items()}


# -- case 12 ---------------------------------------------------------------------------------------

def test_12_rollout_on_a_14029_host_never_recreates_the_serving_r1(e2e_factory):
    """Preflight (placement, rollback-target checks, tag check) sends no dry run that plans a
    recreate; the first step dry run that does (the relay's, in r2) is caught by the docker/ps
    comparison: HALTED naming the relay, r1 never touched, the host serving throughout."""
    from recording import RecordingProgress

    from orchestrator.service.admission import new_rollout
    from orchestrator.service.runner import execute

    e = e2e_factory("dry-run-recreates")
    before = _ids(e.fleet)
    assert R1 in before and R2_OLD in before
    run, rb, table = new_rollout(e.session, "gpu02", TAG, DEFAULT_RUNBOOK)
    final = asyncio.run(execute(e.session, run, rb, table, progress=RecordingProgress(), yes=True))

    # no dry run ever named the serving r1 (nor any engine that was running at the time)
    dry = [c for c in e.fleet.calls if c.server == "compose-manager" and c.is_compose_up and (c.body or {}).get("dry_run")]
    assert dry and not [c for c in dry if R1 in c.body["services"]], [c.body["services"] for c in dry]
    # r1 is the very container that served before the run; the old r2 left only by the run's own down
    after = _running(e.fleet)
    assert after[R1].id == before[R1]
    assert not [o for o in e.fleet.host.orphan_removals()], "a dry run removed an orphan"
    # the one dry run that recreated for real (the relay's, the step acting on it) stopped the run
    assert final.outcome == "HALTED", final.message
    assert RELAY in final.message and "recreated" in final.message and "14029" in final.message
    assert e.fleet.check_invariants() == []


def _live(e):
    from orchestrator.previews.live_plan import build_live_plan, render_live_text

    mark = max((c.seq for c in e.fleet.calls), default=0)
    lp = asyncio.run(build_live_plan(e.session, "gpu02", TAG, DEFAULT_RUNBOOK))
    return lp, render_live_text(lp), [c for c in e.fleet.calls if c.seq > mark]


def test_12_plan_live_on_a_14029_host_changes_nothing_and_says_so(e2e_factory):
    e = e2e_factory("dry-run-recreates")
    before = _ids(e.fleet)
    lp, text, calls = _live(e)
    assert _ids(e.fleet) == before, "plan --live changed the host"
    assert lp.verdict == "would start" and lp.state == "before", lp.reasons
    ups = [c for c in calls if c.server == "compose-manager" and c.is_compose_up]
    assert ups and all(c.body.get("dry_run") for c in ups)
    assert not [c for c in ups if R1 in c.body["services"] or RELAY in c.body["services"]]
    # what it held back is said, with why
    assert any(d.status == "not sent" and RELAY in d.note for d in lp.dry_runs)
    assert "nothing was changed" in text and not lp.changed


def test_12_plan_live_that_changed_a_container_says_so(e2e_factory):
    """A dry run that changes docker/ps anyway (fault `dry-run-not-dry`: even a create is real):
    the preview names the container, exits 4 and never claims that nothing was changed."""
    e = e2e_factory("dry-run-not-dry")
    lp, text, _ = _live(e)
    assert "nothing was changed" not in text and "CONTAINERS CHANGED" in text
    assert lp.changed and R2_NEW in "; ".join(lp.changed), lp.changed
    assert lp.exit_code == 4 and lp.verdict == "would refuse"
    assert any(R2_NEW in r and "new" in r for r in lp.reasons), lp.reasons


# -- case 13 ---------------------------------------------------------------------------------------

@pytest.fixture
def two_dirs(tmp_path):
    """One simulated gpu02; `cli_a` uses ORCHESTRATOR_STATE_DIR, `cli_b` runs in a working directory
    whose `.env` names another state directory."""
    from orchestrator_sim import SimConfig, SimFleet

    fleet = SimFleet(SimConfig(speed=float(SPEED), cold_start_s=1200))
    fleet.__enter__()
    base = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    base.update(fleet.env_for_orchestrator(tmp_path / "inventory.yaml"))
    base.update({"ORCHESTRATOR_TIME_SCALE": SPEED, "ORCHESTRATOR_POLL_INTERVAL": "10"})
    env_a = dict(base, ORCHESTRATOR_STATE_DIR=str(tmp_path / "state-a"))
    work_b = tmp_path / "elsewhere"
    work_b.mkdir()
    (work_b / ".env").write_text(f"ORCHESTRATOR_STATE_DIR={tmp_path / 'state-b'}\n")
    env_b = dict(base, PYTHONPATH=str(ROOT))

    def make(env, cwd):
        def run(*args: str, background: bool = False):
            cmd = [sys.executable, "-m", "orchestrator.cli", *args]
            if background:
                return subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
        return run

    yield fleet, make(env_a, ROOT), make(env_b, work_b), tmp_path
    fleet.__exit__(None, None, None)


def _wait_for_state(cli, state: str, timeout: float = 90.0) -> str:
    def reached() -> str | None:
        r = cli("status", "--json")
        st = json.loads(r.stdout) if r.returncode == 0 else {}
        return st["run_id"] if st.get("state") == state else None

    return wait_until(reached, f"the run to reach {state}", timeout)


def test_13_a_second_journal_never_continues_or_blames_compose_for_a_rollout_it_did_not_start(two_dirs):
    fleet, cli_a, cli_b, tmp = two_dirs
    proc = cli_a("rollout", "gpu02", "--tag", TAG, background=True)
    try:
        run_a = _wait_for_state(cli_a, "r2.soak")
        mark = max(c.seq for c in fleet.calls)
        r = cli_b("rollout", "gpu02", "--tag", TAG, "--yes")
        assert (tmp / "state-b").is_dir(), "the .env's state directory was not used"
        assert r.returncode == 5, (r.returncode, r.stdout, r.stderr)
        text = r.stdout + r.stderr
        assert "no run in this journal" in text and f"({NEW_FILE}@{TAG})" in text, text
        assert "--continue" not in text and "14029" not in text, text
        # its preview says the same (read-only)
        r = cli_b("plan", "gpu02", "--tag", TAG, "--live")
        assert r.returncode == 5 and "no run in this journal" in r.stdout and "--continue`" not in r.stdout, r.stdout[-2000:]
        # and --continue is refused the same way
        r = cli_b("rollout", "gpu02", "--tag", TAG, "--continue", "--yes")
        assert r.returncode == 5 and "no run in this journal" in r.stdout + r.stderr, (r.stdout, r.stderr)
        assert not [c for c in fleet.calls if c.seq > mark and c.is_mutating], "the second journal acted on the host"
        # the first rollout goes on undisturbed
        assert cli_a("approve", run_a).returncode == 0
        assert proc.wait(timeout=180) == 0
    finally:
        proc.kill()
        proc.wait()
    running = _running(fleet)
    assert running[R1].file == NEW_FILE and running[R2_NEW].file == NEW_FILE


def test_13_a_call_the_run_did_not_make_stops_it_before_its_next_mutating_call(two_dirs):
    """While the rollout waits at r2's soak approval, a person recreates nginx with curl. On
    approval, the rollout's next mutating call (r1's scoped down) is not sent: HALTED naming the
    person's call (what, when), nothing rolled back, r1 still serving."""
    fleet, cli_a, _, _ = two_dirs
    proc = cli_a("rollout", "gpu02", "--tag", TAG, background=True)
    try:
        run_a = _wait_for_state(cli_a, "r2.soak")
        url = fleet.host_urls["gpu02"].compose_manager
        body = {"tag": TAG, "file": NEW_FILE, "services": ["nginx"], "env": fleet.dashboard_env,
                "force_recreate": True, "dry_run": False}
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {fleet.tokens.compose_manager}"}, timeout=30) as http:
            with http.stream("POST", "/compose/up", json=body) as resp:
                assert resp.status_code == 200
                lines = [json.loads(x) for x in resp.iter_lines() if x.strip()]
        assert lines[-1]["event"] == "done"
        stamp = fleet.host.action_log()[-1]["timestamp"]
        mark = max(c.seq for c in fleet.calls)
        r1_before = _running(fleet)[R1].id
        assert cli_a("approve", run_a).returncode == 0
        assert proc.wait(timeout=180) == 4
    finally:
        proc.kill()
        proc.wait()
    st = json.loads(cli_a("status", run_a, "--json").stdout)
    assert st["outcome"] == "HALTED"
    msg = st["message"]
    assert "foreign change" in msg and "compose_up of nginx" in msg and stamp in msg, msg
    assert "14029" not in msg
    later = [c for c in fleet.calls if c.seq > mark and c.is_mutating]
    assert later == [], [c.path for c in later]  # nothing sent after the person's call
    running = _running(fleet)
    assert running[R1].id == r1_before and R2_NEW in running
