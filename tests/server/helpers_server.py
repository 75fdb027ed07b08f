"""Constants and helpers the `orchestrate serve` tests share (imported as a module, as in tests/clients)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from waiting import wait_until

from orchestrator.teamserver.guards import Admission, Decision
from orchestrator.util.settings import Settings

TOKEN = "srv-7d3c1f0a9b2e4d6f8a1c3e5b7d9f0a2c"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: The apps answer only Host names they serve (loopback by default): TestClient's "testserver" is not one.
BASE_URL = "http://127.0.0.1"
SPEED = 3000.0  # simulated seconds per real second: a 50-minute cold start takes one second
#: Simulated engine cold start (the production one is ~50 min; the simulator's own tests use 10).
COLD_START_S = 600.0
HOST_TOKEN = "cm-token-5f1e2d3c4b5a69788796a5b4c3d2e1f0"


INVENTORY = """\
dashboard_url: http://127.0.0.1:9
model_proxy_peers:
  peer-a: http://127.0.0.1:9
hosts:
  gpu02:
    compose_manager_url: http://127.0.0.1:9
    instance_name: gpu02
    model_proxy_address: 127.0.0.2:8444
    inference_endpoint: http://127.0.0.1:9
    soak_relay_base_url: http://127.0.0.1
    available_ram_gib: 1223
    available_ram_source: test
    gpus: 8
  gpu13:
    compose_manager_url: http://127.0.0.1:9
    instance_name: gpu13
    model_proxy_address: 127.0.0.13:8444
    inference_endpoint: http://127.0.0.1:9
    soak_relay_base_url: http://127.0.0.1
    available_ram_gib: 1223
    available_ram_source: test
    gpus: 8
"""


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = 120.0, interval: float = 0.05) -> Any:
    """Poll until `predicate()` is truthy (tests/waiting.py): a safety limit, not a timing assertion."""
    return wait_until(predicate, what, timeout, interval)


def _token(tokens: Any, name: str) -> str:
    return tokens[name] if isinstance(tokens, dict) else getattr(tokens, name)


def sim_settings(fleet: Any, state_dir: Path, *, database_url: str = "") -> Settings:
    """demo_settings' equivalent, tolerant of `fleet.tokens` as a mapping or as attributes."""
    state_dir.mkdir(parents=True, exist_ok=True)
    inv = state_dir / "inventory.yaml"
    fleet.write_inventory(inv)
    t = fleet.tokens
    return Settings(
        compose_manager_token=SecretStr(_token(t, "compose_manager")),
        dashboard_token=SecretStr(_token(t, "dashboard")),
        model_proxy_token=SecretStr(_token(t, "model_proxy")),
        inference_token=SecretStr(_token(t, "inference")),
        inventory=inv,
        state_dir=state_dir,
        poll_interval=10.0,
        database_url=database_url,
        # the simulator's GitHub (tag merged and old enough), never api.github.com: no network here
        github_api_url=fleet.urls.github,
    )


def sim_session_factory(settings: Settings) -> Any:
    from orchestrator.hosts.clients.retry import RetryPolicy
    from orchestrator.service.session import Session
    from orchestrator.util.clock import ScaledClock

    return Session.open(settings, clock=ScaledClock(SPEED), retry=RetryPolicy(deadline_s=900, busy_wait_s=5))


class CountingAdmission(Admission):
    """`Admission` that also counts what it decided (install it with
    `monkeypatch.setattr(serving, "Admission", CountingAdmission)`): refusals by reason, evictions,
    and the most unauthenticated connections held at once."""

    def __init__(self, **caps: int) -> None:
        super().__init__(**caps)
        self.refused: dict[str, int] = {}
        self.evicted = 0
        self.peak_unauthenticated = 0

    def arrive(self, conn: Any, address: str) -> Decision:
        decision = super().arrive(conn, address)
        if not decision.admit:
            self.refused[decision.reason] = self.refused.get(decision.reason, 0) + 1
        self.evicted += len(decision.evict)
        self.peak_unauthenticated = max(self.peak_unauthenticated, self.unauthenticated)
        return decision


def build_test_server(app: Any, port: int, monkeypatch: Any, **kw: Any) -> Any:
    """`serving.build_server` on loopback (warnings only), with the module's timeouts given as
    `header_timeout_s` / `tls_shutdown_s` set for this test."""
    from orchestrator.teamserver import serving

    for key, name in (("header_timeout_s", "HEADER_TIMEOUT_S"), ("tls_shutdown_s", "TLS_SHUTDOWN_TIMEOUT_S")):
        if key in kw:
            monkeypatch.setattr(serving, name, kw.pop(key))
    kw.setdefault("log_level", "warning")
    return serving.build_server(app, "127.0.0.1", port, **kw)
