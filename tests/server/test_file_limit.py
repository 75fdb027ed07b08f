"""`orchestrate serve` under an open-file limit it cannot raise: the connection cap shrinks to fit,
a flood of more connections than the limit never makes it run out of descriptors, its log says
why the cap is lower and holds no traceback, and a client with the token is still served.

A real `orchestrate serve` process whose hard RLIMIT_NOFILE is 1800 (so the default cap of 2048
connections cannot fit) gets 2000 half-sent requests from 160 loopback addresses in eight /24s,
all held open at once; then a client with the token asks from a /24 of its own.
"""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from ports import free_port

from helpers_server import AUTH, INVENTORY, TOKEN, wait_for

FD_LIMIT = 1800
FLOOD = 2000


def _limit_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def test_a_flood_beyond_the_file_limit_is_refused_without_running_out_of_descriptors(tmp_path: Path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < FLOOD + 200:
        pytest.skip(f"this test's own process needs {FLOOD + 200} open files (soft limit {soft})")
    inv = tmp_path / "inventory.yaml"
    inv.write_text(INVENTORY)
    port = free_port()
    env = {**os.environ, "ORCHESTRATOR_SERVER_TOKEN": TOKEN, "ORCHESTRATOR_STATE_DIR": str(tmp_path / "state"),
           "ORCHESTRATOR_INVENTORY": str(inv), "ORCHESTRATOR_DATABASE_URL": ""}
    env.pop("ORCHESTRATOR_SERVER_TOKENS_FILE", None)
    log = tmp_path / "serve.log"
    code = "import sys; from orchestrator.cli import main; sys.argv[0] = 'orchestrate'; main()"
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", code, "serve", "--bind", "127.0.0.1", "--port", str(port),
                                 "--no-adopt"], env=env, cwd=tmp_path, stdout=err, stderr=err,
                                preexec_fn=_limit_files)
    held: list[socket.socket] = []
    try:
        def up() -> bool:
            assert proc.poll() is None, log.read_text()[-2000:]
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
            return False

        wait_for(up, "orchestrate serve to start", timeout=60, interval=0.2)
        for i in range(FLOOD):
            source = f"127.0.{40 + i % 8}.{1 + (i // 8) % 20}"
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
                s.sendall(b"GET /runs HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
                held.append(s)
            except OSError:
                pass  # refused or reset: what the server does beyond its cap
        transport = httpx.HTTPTransport(local_address="127.0.60.1", retries=0)
        with httpx.Client(transport=transport, timeout=10) as client:
            assert client.get(f"http://127.0.0.1:{port}/runs", headers=AUTH).status_code == 200
        assert proc.poll() is None
    finally:
        for s in held:
            s.close()
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=20)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    text = log.read_text(errors="replace")
    assert "connection_cap_lowered" in text  # the operator is told why the cap is lower
    assert "Traceback" not in text and "Too many open files" not in text, text[-3000:]
    assert len(text) < 100_000  # a few lines, rate-limited, not a line (or a traceback) per connection
