"""A small driver for the simulator, written with plain httpx (never the project's clients, so
that it checks them independently): tests and demos use it to act on a running SimFleet the way a
careful operator would.

    with SimFleet(SimConfig(speed=6000, cold_start_s=600)) as fleet:
        sim = SimDriver(fleet, httpx.Client())
        sim.swap_r2()                      # down the old r2, dry-run + apply the new one, wait ready
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from orchestrator_sim.compose_manager.repo import (  # noqa: F401 - re-exported for tests
    BASE_CANONICAL_FILE,
    BASE_HOSTS,
    BASE_PREVIOUS_TAG,
    BASE_TARGET_FILE,
    BASE_TARGET_TAG,
)
from orchestrator_sim.fleet.sim_fleet import FleetUrls, SimFleet
from orchestrator_sim.host.sim_host import SimHost

CANARY = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-Canary.yaml"
TARGET = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"
OLD_TAG, NEW_TAG = "v0.0.290", "v0.0.300"
R1 = "model-sg-glm53-w4afp8-tp4-r1"
OLD_R2 = "model-sg-glm53-fp8-tp4-r2"
NEW_R2 = "model-sg-glm53-w4afp8-tp4-r2"
RELAY = "glm53-soak-relay"
LONG = "glm-5-3-flash-long.completions.near.ai"
BASE = "glm-5-3-flash.completions.near.ai"
GPU02 = "203.0.113.2:8444"
# The base tier's engines and the sidecars its switch recreates.
FP8_R1, FP8_R2 = "model-sg-glm53-fp8-tp4-r1", "model-sg-glm53-fp8-tp4-r2"
W4_R1, W4_R2 = "model-sg-glm53-w4afp8-tp4-r1", "model-sg-glm53-w4afp8-tp4-r2"
BASE_SIDECARS = ("proxy-glm53", "otelcol-contrib", "dcgm-glm53")
REGISTRAR = "model-proxy-registrar"
DOWNLOADER = "model-downloader"


@dataclass
class Stream:
    status: int
    lines: list[str] = field(default_factory=list)
    done: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    text: str = ""
    plan: dict[str, Any] | None = None  # a dry run's `plan` event

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.done is not None and self.done["success"] is True


@dataclass
class SimDriver:
    """Acts on one host of the fleet: `fleet.host` unless `host_name` is given (`sim.on("gpu03")`)."""

    fleet: SimFleet
    client: httpx.Client
    host_name: str | None = None

    def on(self, name: str) -> SimDriver:
        """The same driver aimed at host `name` (its compose-manager, relay, env map)."""
        return SimDriver(self.fleet, self.client, name)

    @property
    def host(self) -> SimHost:
        return self.fleet.hosts[self.host_name] if self.host_name else self.fleet.host

    @property
    def urls(self) -> FleetUrls:
        return self.fleet.host_urls[self.host.name]

    @property
    def env(self) -> dict[str, str]:
        """The host's env map as the dashboard serves it now."""
        return self.fleet.host_env(self.host.name)

    # -- compose-manager
    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.fleet.tokens.compose_manager}"}

    def cm(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return self.client.request(method, self.urls.compose_manager + path, headers=self.auth, **kw)

    def request(
        self, tag: str, file: str, services: list[str], *, env: dict[str, str] | None = None, **extra: Any
    ) -> dict[str, Any]:
        return {
            "tag": tag,
            "file": file,
            "services": services,
            "env": self.env if env is None else env,
            "force_recreate": False,
            **extra,
        }

    def stream(self, path: str, body: dict[str, Any]) -> Stream:
        with self.client.stream("POST", self.urls.compose_manager + path, json=body, headers=self.auth) as r:
            if r.status_code != 200:
                r.read()
                try:
                    return Stream(r.status_code, error=r.json(), text=r.text)
                except ValueError:
                    return Stream(r.status_code, text=r.text)
            out = Stream(200)
            for raw in r.iter_lines():
                if not raw.strip():
                    continue
                event = json.loads(raw)
                if event["event"] == "done":
                    out.done = event
                elif event["event"] == "plan":
                    out.plan = event
                else:
                    out.lines.append(event["data"])
            return out

    def up(self, tag: str, file: str, services: list[str], *, dry_run: bool, **kw: Any) -> Stream:
        return self.stream("/compose/up", self.request(tag, file, services, dry_run=dry_run, **kw))

    def down(self, tag: str, file: str, services: list[str], **kw: Any) -> Stream:
        return self.stream("/compose/down", self.request(tag, file, services, **kw))

    def safe_up(self, tag: str, file: str, services: list[str], *, force_recreate: bool = False) -> Stream:
        """Dry run, then apply: what a correct orchestrator sends. `force_recreate` for services
        whose only change is inline configs content (compose would not recreate them: #11900)."""
        dry = self.up(tag, file, services, dry_run=True, force_recreate=force_recreate)
        assert dry.ok, dry
        applied = self.up(tag, file, services, dry_run=False, force_recreate=force_recreate)
        assert applied.ok, applied
        return applied

    def ps(self) -> dict[str, dict[str, Any]]:
        out = self.cm("GET", "/docker/ps").json()["output"]
        return {row["Names"]: row for row in (json.loads(line) for line in out.splitlines() if line)}

    def logs(self, service: str, *, file: str = TARGET, tail: int = 5000) -> str:
        r = self.cm(
            "POST", "/compose/logs", json={"file": file, "services": [service], "tail": tail}
        )
        assert r.status_code == 200, r.text
        return r.json()["output"]

    def actions(self) -> list[dict[str, Any]]:
        return self.cm("GET", "/v1/attestation/report", params={"nonce": "0" * 64}).json()["actions"]

    # -- other systems
    def peer(self, peer: str, path: str, **params: str) -> httpx.Response:
        return self.client.get(
            self.fleet.urls.peers[peer] + path,
            params=params,
            headers={"Authorization": f"Bearer {self.fleet.tokens.model_proxy}"},
        )

    def long_listing(self, peer: str = "peer-a") -> list[dict[str, Any]]:
        return [b for b in self.peer(peer, "/backends/list", domain=LONG).json()["backends"] if b["address"] == GPU02]

    def domain_listing(self, peer: str = "peer-a") -> list[dict[str, Any]]:
        """This host's entries under its own domain on `peer` (empty: not listed)."""
        address = f"{self.host.host_ip}:8444"
        backends = self.peer(peer, "/backends/list", domain=self.host.domain).json()["backends"]
        return [b for b in backends if b["address"] == address]

    def running_reqs(self, port: int) -> int:
        """sglang:num_running_reqs of the engine behind the soak relay's `port`."""
        r = self.relay(port, "GET", "/metrics")
        assert r.status_code == 200, r.text
        line = next(x for x in r.text.splitlines() if x.startswith("sglang:num_running_reqs{"))
        return int(float(line.rsplit(" ", 1)[1]))

    def chat(self, messages: list[dict[str, Any]], **kw: Any) -> httpx.Response:
        body = {"model": "z-ai/glm-5.3-flash", "messages": messages, "temperature": 0, "max_tokens": 16, **kw}
        return self.client.post(
            self.urls.inference + "/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {self.fleet.tokens.inference}"},
        )

    def relay(self, port: int, method: str, path: str, *, token: str | None = None, **kw: Any) -> httpx.Response:
        token = self.env["PROXY_TOKEN"] if token is None else token
        # a connection of its own: the relay's listener closes with its container, and a pooled
        # connection from before a down/up is a dead one the next request would meet
        return self.client.request(
            method, self.urls.relay[port] + path, headers={"Authorization": f"Bearer {token}", "Connection": "close"}, **kw
        )

    # -- waiting (on simulated state, with a generous real-time bound)
    def wait(self, predicate: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = predicate()
            except httpx.ConnectError:
                # a relay port opens on the simulator's next tick after its container starts
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.01)

    def wait_sim(self, seconds: float) -> None:
        """Let `seconds` of simulation time pass."""
        target = self.fleet.now() + seconds
        self.wait(lambda: self.fleet.now() >= target, f"sim time {target:.0f}")

    def ready(self, name: str) -> bool:
        view = self.host.container(name)
        return bool(view and view.ready)

    def wait_ready(self, name: str) -> None:
        self.wait(lambda: self.ready(name), f"{name} ready")

    # -- the rollout's first steps, done correctly
    def swap_r2(self, *, wait_ready: bool = True) -> None:
        assert self.down(OLD_TAG, CANARY, [OLD_R2]).ok
        self.safe_up(NEW_TAG, TARGET, [NEW_R2])
        if wait_ready:
            self.wait_ready(NEW_R2)


# ---------------------------------------------------------------- in-process compose-manager
@dataclass
class SteppingClock:
    """A simulation clock for in-process tests: every look at it moves time `step` seconds on,
    unless `frozen` (then an operation in flight stays in flight until the test lets it go)."""

    step: float = 5.0
    frozen: bool = False
    t: float = 0.0

    def monotonic(self) -> float:
        if not self.frozen:
            self.t += self.step
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += max(0.0, seconds)


@dataclass
class InProcessComposeManager:
    """compose-manager's ASGI app over a simulated host, without a server: drive it with
    `httpx.AsyncClient(transport=httpx.ASGITransport(app=cm.app), base_url=...)`."""

    app: Any
    host: Any
    token: str
    env: dict[str, str]
    clock: SteppingClock


def in_process_compose_manager(
    *, fresh: bool = True, faults: tuple[str, ...] = (), seed: int = 7, step: float = 5.0
) -> InProcessComposeManager:
    import random
    from datetime import UTC, datetime

    from orchestrator_sim.compose_manager.app import build_compose_manager_app
    from orchestrator_sim.compose_manager.repo import SimRepository
    from orchestrator_sim.faults import ActiveFaults
    from orchestrator_sim.fleet.sim_fleet import gpu02_env_map
    from orchestrator_sim.host.sim_host import SimHost
    from orchestrator_sim.record.calls import CallRecorder

    rng = random.Random(seed)
    active = ActiveFaults(faults)
    clock = SteppingClock(step=step)
    env = gpu02_env_map(rng, active)
    host = SimHost(
        clock=clock,
        repo=SimRepository.load(),
        faults=active,
        deploy_env=env,
        epoch=datetime(2026, 11, 30, 20, 0, tzinfo=UTC),
        rng=random.Random(seed),
        cold_start_s=600.0,
        fresh=fresh,
    )
    token = "".join(rng.choice("0123456789abcdef") for _ in range(32))
    recorder = CallRecorder(host.now)
    return InProcessComposeManager(build_compose_manager_app(host, token, active, recorder), host, token, env, clock)
