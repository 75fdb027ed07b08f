"""The command line against the simulator: rollout, rollback (whole host, r2 first; r1 alone
refused), approve, abort, status and runs, each in its own process as an on-call engineer runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ports import free_port
from waiting import wait_until

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SPEED = "3000"
R1 = "model-sg-glm53-w4afp8-tp4-r1"
R2_NEW = "model-sg-glm53-w4afp8-tp4-r2"
R2_OLD = "model-sg-glm53-fp8-tp4-r2"
OLD_FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-Canary.yaml"


@pytest.fixture
def cli(tmp_path):
    from orchestrator_sim import SimConfig, SimFleet

    fleet = SimFleet(SimConfig(speed=float(SPEED), cold_start_s=1200))
    fleet.__enter__()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    env.update(fleet.env_for_orchestrator(tmp_path / "inventory.yaml"))
    env.update({"ORCHESTRATOR_STATE_DIR": str(tmp_path / "state"), "ORCHESTRATOR_TIME_SCALE": SPEED,
                "ORCHESTRATOR_POLL_INTERVAL": "10"})

    def run(*args: str, background: bool = False):
        cmd = [sys.executable, "-m", "orchestrator.cli", *args]
        if background:
            return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)

    run.fleet = fleet  # type: ignore[attr-defined]
    yield run
    fleet.__exit__(None, None, None)


def _running(fleet):
    return {c.service: c for c in fleet.host.containers() if c.state in ("running", "restarting")}


def _wait_for_state(cli, state: str, timeout: float = 120.0) -> str:
    def reached() -> str | None:
        r = cli("status", "--json")
        st = json.loads(r.stdout) if r.returncode == 0 else {}
        return st["run_id"] if st.get("state") == state else None

    return wait_until(reached, f"the run to reach {state}", timeout)


def _polled(fleet, rounds: int = 3) -> None:
    """Wait until the runner has sent `rounds` more calls to the simulator (each round of a gate's
    wait checks the engines): a run that has not moved after that was free to, and did not."""
    mark = max((c.seq for c in fleet.calls), default=0)
    wait_until(lambda: sum(1 for c in fleet.calls if c.seq > mark) >= rounds, f"{rounds} more calls of the runner")


def test_whole_host_rollback_after_done_restores_both_r2_first(cli):
    r = cli("rollout", "gpu02", "--tag", "v0.0.300", "--yes")
    assert r.returncode == 0, r.stdout[-2000:]
    fleet = cli.fleet
    mark = len(fleet.calls)
    r = cli("rollback", "gpu02", "--replica", "all")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr  # the rollback asked for reached its target
    run = _running(fleet)
    assert run[R2_OLD].file == OLD_FILE and run[R1].file == OLD_FILE
    assert R2_NEW not in run
    downs = [c.body["services"] for c in fleet.calls[mark:] if c.is_compose_down]
    assert downs.index([R2_NEW]) < downs.index([R1]), "r2 goes back first"
    assert fleet.host.orphan_removals() == []
    assert fleet.check_invariants() == []  # includes: never both replica slots down


def test_rollback_r1_alone_while_the_new_r2_runs_is_refused_without_change(cli):
    assert cli("rollout", "gpu02", "--tag", "v0.0.300", "--yes").returncode == 0
    fleet = cli.fleet
    mark = len(fleet.calls)
    r = cli("rollback", "gpu02", "--replica", "r1")
    assert r.returncode == 5
    assert "--remove-orphans" in r.stderr and "--replica all" in r.stderr
    assert [c for c in fleet.calls[mark:] if c.is_compose_up or c.is_compose_down] == []


def test_r1_failure_halts_exit_4_and_says_what_to_run(cli):
    cli.fleet.__exit__(None, None, None)
    from orchestrator_sim import SimConfig, SimFleet

    fleet = SimFleet(SimConfig(speed=float(SPEED), cold_start_s=1200, faults=["oom:r1"]))
    fleet.__enter__()
    cli.fleet = fleet
    env_inv = fleet.env_for_orchestrator()
    r = subprocess.run([sys.executable, "-m", "orchestrator.cli", "rollout", "gpu02", "--tag", "v0.0.300", "--yes"],
                       env={**{k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}, **env_inv,
                            "ORCHESTRATOR_STATE_DIR": str(Path(env_inv["ORCHESTRATOR_INVENTORY"]).parent / "st"),
                            "ORCHESTRATOR_TIME_SCALE": SPEED},
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 4, r.stdout[-2000:]
    said = " ".join(r.stdout.split())  # the ending is wrapped for a terminal (oncall.final_lines)
    assert "r2 alone" in said and "orchestrate rollback gpu02 --replica all" in said and "--retry" in said
    assert _running(fleet)[R2_NEW].ready
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}, **env_inv,
           "ORCHESTRATOR_STATE_DIR": str(Path(env_inv["ORCHESTRATOR_INVENTORY"]).parent / "st"), "ORCHESTRATOR_TIME_SCALE": SPEED}
    halted = json.loads(subprocess.run([sys.executable, "-m", "orchestrator.cli", "runs", "--json"], env=env, cwd=ROOT,
                                       capture_output=True, text=True).stdout)[0]
    # --retry starts r1 again from the new file, as a child run; r2 is not touched again
    mark = len(fleet.calls)
    r = subprocess.run([sys.executable, "-m", "orchestrator.cli", "resume", halted["run_id"], "--retry", "--yes"],
                       env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    runs = json.loads(subprocess.run([sys.executable, "-m", "orchestrator.cli", "runs", "--json"], env=env, cwd=ROOT,
                                     capture_output=True, text=True).stdout)
    assert runs[0]["parent_run_id"] == halted["run_id"]
    applied = [c.body["services"] for c in fleet.calls[mark:] if c.is_compose_up and not c.body.get("dry_run")]
    assert applied and applied[0] == [R1]
    assert all(R2_NEW not in (c.body or {}).get("services", []) for c in fleet.calls[mark:] if c.is_compose_down)
    assert r.returncode in (0, 4)  # the simulated OOM may strike the new r1 again: then it halts the same way
    assert _running(fleet)[R2_NEW].ready


def test_approve_ends_the_soak_gate(cli):
    proc = cli("rollout", "gpu02", "--tag", "v0.0.300", background=True)
    try:
        run_id = _wait_for_state(cli, "r2.soak")
        _polled(cli.fleet)
        assert json.loads(cli("status", run_id, "--json").stdout)["state"] == "r2.soak", "waits for the approval"
        r = cli("approve", run_id)
        assert r.returncode == 0
        assert proc.wait(timeout=120) == 0
    finally:
        proc.kill()
    st = json.loads(cli("status", run_id, "--json").stdout)
    assert st["outcome"] == "DONE"
    text = cli("status", run_id).stdout
    assert "r2.soak" in text and "DONE" in text


def test_abort_during_the_r2_soak_rolls_r2_back(cli):
    proc = cli("rollout", "gpu02", "--tag", "v0.0.300", background=True)
    try:
        run_id = _wait_for_state(cli, "r2.soak")
        r = cli("abort", run_id)
        assert r.returncode == 0 and "abort recorded" in r.stdout
        assert proc.wait(timeout=120) == 3
    finally:
        proc.kill()
    run = _running(cli.fleet)
    assert R2_OLD in run and R2_NEW not in run
    runs = json.loads(cli("runs", "--json").stdout)
    assert runs[0]["outcome"] == "ROLLED_BACK"


def test_a_second_rollout_of_the_same_host_is_refused(cli):
    proc = cli("rollout", "gpu02", "--tag", "v0.0.300", background=True)
    try:
        _wait_for_state(cli, "r2.soak")
        r = cli("rollout", "gpu02", "--tag", "v0.0.300", "--yes")
        assert r.returncode == 5
        assert "leased by run" in r.stderr
    finally:
        proc.kill()
        proc.wait()


SERVER_TOKEN = "server-token-3c9a1f7e5d2b8046a1c3e5f7092b4d6e"


def test_serve_runs_a_rollout_submitted_with_server(cli, tmp_path):
    port = free_port()
    fleet = cli.fleet
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    env.update(fleet.env_for_orchestrator(tmp_path / "srv-inventory.yaml"))
    env.update({"ORCHESTRATOR_STATE_DIR": str(tmp_path / "server-state"), "ORCHESTRATOR_TIME_SCALE": SPEED,
                "ORCHESTRATOR_SERVER_TOKEN": SERVER_TOKEN})
    server = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "serve", "--port", str(port)], env=env, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        import httpx

        def listening() -> bool:
            assert server.poll() is None, server.communicate()[1][-2000:]
            try:
                return httpx.get(f"{url}/healthz", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(listening, "the server to listen")
        client_env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
        client_env["ORCHESTRATOR_SERVER_TOKEN"] = SERVER_TOKEN
        r = subprocess.run([sys.executable, "-m", "orchestrator.cli", "rollout", "gpu02", "--tag", "v0.0.300", "--yes",
                            "--server", url], env=client_env, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-1000:]
        assert fleet.check_invariants() == []
        assert _running(fleet)[R2_NEW].ready and _running(fleet)[R1].file.endswith("LongContext.yaml")
        # the messages that tell an operator to look with `runs --server` / `status RUN --server` are true
        client = tmp_path / "client"  # an empty journal here: both answers can only come from the server
        client.mkdir()
        listed = subprocess.run([sys.executable, "-m", "orchestrator.cli", "runs", "--server", url, "--json"],
                                env=client_env, cwd=client, capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
        [run] = json.loads(listed.stdout)["runs"]
        shown = subprocess.run([sys.executable, "-m", "orchestrator.cli", "status", run["run_id"], "--server", url],
                               env=client_env, cwd=client, capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.startswith(f"run {run['run_id']} rollout of gpu02 to v0.0.300: DONE"), shown.stdout
    finally:
        server.terminate()
        server.wait(timeout=30)
