"""`serve` as the image runs it (issue 22): the bind and port come from the environment the
Dockerfile sets (ORCHESTRATOR_SERVER_BIND=0.0.0.0, 127.0.0.1 stays the default outside), and the
image's HEALTHCHECK (`python -m orchestrator.teamserver.healthcheck`) reads the server healthy while it serves
and unhealthy once it is gone. A real `orchestrate serve` process, over TLS as on a network."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from ports import free_port
from waiting import wait_until

from helpers_server import INVENTORY, TOKEN
from orchestrator.teamserver.healthcheck import main as healthcheck
from orchestrator.teamserver.healthcheck import probe, serves

ORCHESTRATE = str(Path(sys.executable).parent / "orchestrate")



def image_env(tmp_path: Path, port: int) -> dict[str, str]:
    (tmp_path / "hosts.yaml").write_text(INVENTORY)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    env.update({"ORCHESTRATOR_STATE_DIR": str(tmp_path / "state"), "ORCHESTRATOR_INVENTORY": str(tmp_path / "hosts.yaml"),
                "ORCHESTRATOR_SERVER_BIND": "0.0.0.0", "ORCHESTRATOR_SERVER_PORT": str(port),
                "ORCHESTRATOR_SERVER_TOKEN": TOKEN, "XDG_STATE_HOME": str(tmp_path / "xdg")})
    return env


def test_the_image_bind_comes_from_the_environment_and_keeps_the_tls_rule(tmp_path):
    with socket.socket() as taken:  # the port is in use too: the exposure is judged first, whatever listens
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        r = subprocess.run([ORCHESTRATE, "serve"], env=image_env(tmp_path, taken.getsockname()[1]), cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.startswith("orchestrate: refusing to bind 0.0.0.0 without TLS"), r.stderr
    # outside the image: loopback by default
    r = subprocess.run([ORCHESTRATE, "serve", "--help"], capture_output=True, text=True, timeout=60,
                       env={k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")})
    assert "127.0.0.1" in r.stdout and "ORCHESTRATOR_SERVER_BIND" in r.stdout


def test_the_healthcheck_reads_a_served_container_healthy_and_a_stopped_one_not(tmp_path, capsys):
    trustme = pytest.importorskip("trustme")
    cert = trustme.CA().issue_cert("127.0.0.1", "localhost")
    cert.private_key_pem.write_to_path(str(tmp_path / "server.key"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "server.pem"))
    port = free_port()
    env = image_env(tmp_path, port)
    proc = subprocess.Popen([ORCHESTRATE, "serve", "--tls-cert", str(tmp_path / "server.pem"),
                             "--tls-key", str(tmp_path / "server.key")], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def answers() -> bool:
            assert proc.poll() is None, proc.communicate()[1]
            return probe(port)[0]

        wait_until(answers, "serve to answer /healthz")
        # listening on every interface, as -p needs in a container
        listening = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True)
        if listening.returncode == 0:
            assert "0.0.0.0:" in listening.stdout, listening.stdout
        assert healthcheck(["orchestrate", "serve", "--tls-cert", "x"], {"ORCHESTRATOR_SERVER_PORT": str(port)}) == 0
        assert capsys.readouterr().out == "healthy: /healthz answered 200\n"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert healthcheck(["orchestrate", "serve"], {"ORCHESTRATOR_SERVER_PORT": str(port)}) == 1
    assert capsys.readouterr().out.startswith(f"unhealthy: no answer on 127.0.0.1:{port}")


def test_the_healthcheck_port_and_a_one_shot_container():
    assert not serves(["orchestrate", "plan", "gpu02"]) and not serves(["orchestrate", "serve", "token", "add", "x"])
    assert serves(["orchestrate", "serve"]) and serves(None)
    assert healthcheck(["orchestrate", "rollout", "gpu02"], {}) == 0
