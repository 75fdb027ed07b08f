"""Fixtures for `orchestrate serve` tests: apps over a throwaway journal, optionally a simulated gpu02.

No network but loopback: the plain inventory points at 127.0.0.1:9 and is never contacted (the
executor is replaced in those tests); the simulator serves on loopback ports.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from helpers_server import COLD_START_S, HOST_TOKEN, INVENTORY, SPEED, wait_for
from orchestrator.util.settings import Settings


@pytest.fixture(autouse=True)
def _no_ambient_server_token(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Tests decide the token; a developer's environment or .env must not."""
    monkeypatch.delenv("ORCHESTRATOR_SERVER_TOKEN", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    inv = tmp_path / "inventory.yaml"
    inv.write_text(INVENTORY)
    return Settings(inventory=inv, state_dir=tmp_path / "state", database_url="", lease_ttl=120.0,
                    compose_manager_token=SecretStr(HOST_TOKEN))


# --------------------------------------------------------------------------- simulator


@pytest.fixture
def sim_fleet() -> Iterator[Callable[..., Any]]:
    """A factory of running simulated fleets (skips if the simulator is not importable)."""
    sim = pytest.importorskip("orchestrator_sim", reason="orchestrator_sim (the simulator) does not import", exc_type=ImportError)
    fleets: list[Any] = []

    def make(*faults: str) -> Any:
        fleet = sim.SimFleet(sim.SimConfig(speed=SPEED, faults=list(faults), cold_start_s=COLD_START_S))
        fleet.__enter__()
        fleets.append(fleet)
        return fleet

    yield make
    for f in fleets:
        f.__exit__(None, None, None)


# --------------------------------------------------------------------------- PostgreSQL


@pytest.fixture
def tls_files(tmp_path):
    """(cert, key, client SSLContext trusting them) for 127.0.0.1."""
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert_pem, key_pem = tmp_path / "s.pem", tmp_path / "s.key"
    cert.private_key_pem.write_to_path(str(key_pem))
    cert.cert_chain_pems[0].write_to_path(str(cert_pem))
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return cert_pem, key_pem, ctx


@pytest.fixture
def live_server() -> Iterator[Any]:
    """Serve an app with uvicorn on a free loopback port, in a thread."""
    import uvicorn

    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(app: Any) -> str:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="warning", access_log=False))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        wait_for(lambda: server.started, "uvicorn to start", timeout=15)
        servers.append((server, thread))
        return f"http://127.0.0.1:{port}"

    def stop_all() -> None:
        while servers:
            server, thread = servers.pop()
            server.should_exit = True
            thread.join(timeout=15)

    start.stop_all = stop_all  # type: ignore[attr-defined]
    yield start
    stop_all()
