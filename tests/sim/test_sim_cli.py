"""`python -m orchestrator_sim serve` in its own process, as crash tests use it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml

from orchestrator_sim import check_invariants, load_calls, load_timeline
from orchestrator_sim.testing import NEW_R2, NEW_TAG, TARGET


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "the simulator did not become ready"
        time.sleep(0.05)


def test_serve_writes_its_state_dir_and_stops_on_sigterm(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator_sim",
            "serve",
            "--state-dir",
            str(tmp_path),
            "--speed",
            "6000",
            "--cold-start",
            "600",
            "--seed",
            "3",
            "--fault",
            "peer-missing",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(tmp_path / "ready", proc)
        inventory = yaml.safe_load((tmp_path / "inventory.yaml").read_text())
        assert set(inventory) == {"dashboard_url", "model_proxy_peers", "hosts"}
        assert set(inventory["model_proxy_peers"]) == {"peer-a", "peer-b"}
        gpu02 = inventory["hosts"]["gpu02"]
        assert gpu02["instance_name"] == "gpu02" and gpu02["model_proxy_address"] == "203.0.113.2:8444"
        assert set(gpu02["soak_relay_port_map"]) == {8000, 8008, 8009, 8010} and gpu02["gpus"] == 8  # 8000: the in-host proxy (issue 23)
        assert gpu02["available_ram_gib"] == 1223 and gpu02["soak_relay_base_url"] == "http://127.0.0.1"
        env = dict(line.split("=", 1) for line in (tmp_path / "sim.env").read_text().splitlines())
        assert set(env) == {
            "ORCHESTRATOR_COMPOSE_MANAGER_TOKEN",
            "ORCHESTRATOR_DASHBOARD_TOKEN",
            "ORCHESTRATOR_MODEL_PROXY_TOKEN",
            "ORCHESTRATOR_INFERENCE_TOKEN",
            "ORCHESTRATOR_GITHUB_API_URL",
            "ORCHESTRATOR_INVENTORY",
            "ORCHESTRATOR_TIME_SCALE",
        }
        assert Path(env["ORCHESTRATOR_INVENTORY"]) == tmp_path / "inventory.yaml"
        assert float(env["ORCHESTRATOR_TIME_SCALE"]) > 1  # a drill's soaks pass at the simulator's speed

        with httpx.Client(timeout=10) as client:
            instances = client.get(
                inventory["dashboard_url"] + "/api/instances",
                headers={"Authorization": f"Bearer {env['ORCHESTRATOR_DASHBOARD_TOKEN']}"},
            ).json()
            dashboard_env = next(i for i in instances if i["name"] == "gpu02")["env_vars"]
            body = {
                "tag": NEW_TAG,
                "file": TARGET,
                "services": [NEW_R2],
                "env": dashboard_env,
                "force_recreate": False,
                "dry_run": True,
            }
            r = client.post(
                gpu02["compose_manager_url"] + "/compose/up",
                json=body,
                headers={"Authorization": f"Bearer {env['ORCHESTRATOR_COMPOSE_MANAGER_TOKEN']}"},
            )
            assert r.status_code == 200 and '"done"' in r.text
            peer_b = client.get(
                inventory["model_proxy_peers"]["peer-b"] + "/backends/list",
                params={"domain": "glm-5-3-flash-long.completions.near.ai"},
                headers={"Authorization": f"Bearer {env['ORCHESTRATOR_MODEL_PROXY_TOKEN']}"},
            ).json()
            assert peer_b["backends"] == []  # --fault peer-missing reached the process

        calls = load_calls(tmp_path / "calls.jsonl")  # written as it goes, before any shutdown
        up = next(c for c in calls if c.path == "/compose/up")
        assert up.outcome == "done:ok" and up.body["env"]["PROXY_TOKEN"].startswith("sha256:")
        assert dashboard_env["PROXY_TOKEN"] not in (tmp_path / "calls.jsonl").read_text()
        assert check_invariants(calls, dashboard_env=dashboard_env) == []
        assert load_timeline(tmp_path / "timeline.jsonl") == []
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "simulator listening" in out and not (tmp_path / "ready").exists()


def test_faults_command_prints_the_table() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator_sim", "faults"], capture_output=True, text=True, check=True
    ).stdout
    for name in ("oom:r1|r2", "busy-409:N", "zombie-after-down", "tag-unknown"):
        assert name in out


def test_serve_simulates_the_hosts_it_is_given(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator_sim", "serve", "--state-dir", str(tmp_path), "--seed", "3",
         "--host", "gpu02", "--host", "gpu03", "--fault", "host-unhealthy@gpu03"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(tmp_path / "ready", proc)
        inventory = yaml.safe_load((tmp_path / "inventory.yaml").read_text())
        assert list(inventory["hosts"]) == ["gpu02", "gpu03"]
        assert inventory["hosts"]["gpu03"]["model_proxy_address"] == "203.0.113.3:8444"
        env = dict(line.split("=", 1) for line in (tmp_path / "sim.env").read_text().splitlines())
        r = httpx.get(
            inventory["model_proxy_peers"]["peer-a"] + "/backends/list",
            params={"domain": "glm-5-3-flash.completions.near.ai"},
            headers={"Authorization": f"Bearer {env['ORCHESTRATOR_MODEL_PROXY_TOKEN']}"},
        )
        listing = {b["address"]: b["healthy"] for b in r.json()["backends"]}
        assert listing["203.0.113.3:8444"] is False and listing["203.0.113.4:8444"] is True
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.returncode == 0
