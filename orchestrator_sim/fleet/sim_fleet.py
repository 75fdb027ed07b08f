"""`SimFleet`: every simulated system served over loopback from one background thread.

A fleet simulates one or more hosts (`SimConfig.hosts`, default gpu02 alone): gpu02 (long-context
tier) and/or the base-tier hosts gpu03, gpu04, gpu23. Each host has its own compose-manager, its
own inference endpoint and soak relay ports (8008 -> r1, 8009 -> r2), and its own env map on the
shared dashboard; the two model-proxy peers and the simulated GitHub are shared and list every
host under its domain. `fleet.host` is gpu02 when simulated (else the first host); every call of
every host is in `fleet.calls` (`RecordedCall.host` names the host).

with SimFleet(SimConfig(speed=600, faults=["oom:r2"])) as fleet:
    fleet.write_inventory(path)
    env = fleet.env_for_orchestrator()     # tokens + ORCHESTRATOR_INVENTORY
    ...                                     # run the orchestrator with ScaledClock(600)
    assert fleet.check_invariants() == []
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import uvicorn
from starlette.types import ASGIApp

from orchestrator.util.clock import ScaledClock
from orchestrator_sim.apps.dashboard import DashboardState, build_dashboard_app
from orchestrator_sim.apps.github import build_github_app
from orchestrator_sim.apps.inference import build_host_proxy_app, build_inference_app, build_relay_app
from orchestrator_sim.apps.model_proxy import build_model_proxy_app
from orchestrator_sim.apps.prometheus import build_prometheus_app
from orchestrator_sim.apps.registry import build_registry_app
from orchestrator_sim.compose_manager.app import StreamCut, build_compose_manager_app
from orchestrator_sim.compose_manager.repo import TARGET_TAG, SimRepository
from orchestrator_sim.faults import ActiveFaults
from orchestrator_sim.fleet.config import (  # noqa: F401 - re-exported (tests, bench, testing.py, __init__)
    BASE_HOST_IPS,
    KNOWN_HOSTS,
    LOG_LINES_ENV,
    LOOPBACK,
    PEERS,
    RELAY_PORTS,
    FleetTokens,
    FleetUrls,
    SimConfig,
    _secret,
    base_env_map,
    gpu02_env_map,
    log_lines_from_env,
)
from orchestrator_sim.fleet.files import FleetFiles
from orchestrator_sim.host.containers import BASE_DOMAIN, LONG_DOMAIN
from orchestrator_sim.host.sim_host import SimHost
from orchestrator_sim.record.calls import CallRecorder, RecordedCall, RecordingMiddleware
from orchestrator_sim.record.invariants import check_base_tier, check_invariants
from orchestrator_sim.record.timeline import ServingTimeline

TICK_S = 0.005  # real seconds between two runs of due events


class _DropStreamCuts(logging.Filter):
    """uvicorn logs the exception we raise on purpose to cut a compose stream: keep it quiet."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        seen = 0
        while exc is not None and seen < 10:
            if isinstance(exc, StreamCut):
                return False
            if isinstance(exc, BaseExceptionGroup) and any(isinstance(e, StreamCut) for e in exc.exceptions):
                return False
            exc = exc.__cause__ or exc.__context__
            seen += 1
        return True


_filter = _DropStreamCuts()
if _filter not in logging.getLogger("uvicorn.error").filters:
    logging.getLogger("uvicorn.error").addFilter(_filter)


def _bind(*, reuse: bool = True) -> socket.socket:
    """A loopback socket on a free port. `reuse=False` for servers that never rebind their port:
    two SO_REUSEADDR sockets bound to port 0 can be handed the same port, and the second listen()
    then fails with EADDRINUSE (seen with several fleets in parallel test workers)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    if reuse:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((LOOPBACK, 0))
    return sock



class _Listener:
    """One uvicorn server on a fixed loopback port that can be closed and reopened (the soak
    relay's ports refuse connections while its container is not running)."""

    def __init__(self, app: ASGIApp, sock: socket.socket) -> None:
        self.app = app
        self.port = sock.getsockname()[1]
        self._sock: socket.socket | None = sock
        self.server: uvicorn.Server | None = None
        self.task: asyncio.Task[None] | None = None

    @property
    def open(self) -> bool:
        return self.server is not None

    def start(self) -> bool:
        """Listen again; False if the port is still held by the previous server (retry later)."""
        sock = self._sock
        if sock is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((LOOPBACK, self.port))
            except OSError:
                sock.close()
                return False
        self._sock = None
        self.server = uvicorn.Server(
            uvicorn.Config(self.app, log_config=None, lifespan="off", access_log=False, timeout_graceful_shutdown=1)
        )
        self.task = asyncio.create_task(self.server.serve(sockets=[sock]))
        return True

    async def stop(self, *, reserve: bool = True) -> None:
        if self.server is None:
            return
        server, task = self.server, self.task
        self.server, self.task = None, None
        server.should_exit = True
        for listening in getattr(server, "servers", []):
            listening.close()  # refuse new connections now, not at uvicorn's next tick
        if task is not None:
            await task
        if reserve:
            self._reserve()

    def _reserve(self) -> None:
        """Keep the port bound, not listening, while the container is stopped: connections are
        refused exactly as on a closed port, and no other process (another test worker's simulator
        binding port 0) can take it meanwhile and answer in the relay's place."""
        if self._sock is not None:
            return
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, self.port))
        except OSError:
            sock.close()
            return
        self._sock = sock

    def release_unused_socket(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


class SimFleet(FleetFiles):
    """All simulated systems around the simulated hosts (`SimConfig.hosts`), on free loopback
    ports, in a background thread. `hosts`: name -> SimHost; `host_urls`: name -> its endpoints
    (`urls` is `fleet.host`'s); `host_env(name)`: its env map on the dashboard."""

    def __init__(self, config: SimConfig | None = None, *, state_dir: Path | None = None,
                 clock: ScaledClock | None = None) -> None:
        # `clock`: the simulation's time, shared with an in-process orchestrator that must agree
        # with it exactly (default: its own ScaledClock at `config.speed`)
        self.config = config or SimConfig()
        self.state_dir = Path(state_dir) if state_dir else None
        rng = random.Random(self.config.seed)
        self.faults = ActiveFaults(self.config.faults)
        self.clock = clock if clock is not None else ScaledClock(self.config.speed)
        self.tokens = FleetTokens(
            compose_manager=_secret(rng), dashboard=_secret(rng), model_proxy=_secret(rng), inference=_secret(rng)
        )
        repo = SimRepository.load()
        if self.faults.active("tag-too-recent"):
            repo = repo.with_tag_age(TARGET_TAG, 5.0)
        if self.faults.active("tag-unknown"):
            repo = repo.without_tag(TARGET_TAG)
        if self.config.initial == "long-context":
            repo = repo.after_294()
        elif self.config.initial != "canary":
            raise ValueError(f"SimConfig.initial must be canary or long-context, not {self.config.initial!r}")
        names = tuple(self.config.hosts)
        if not names or len(set(names)) != len(names) or any(n not in KNOWN_HOSTS for n in names):
            raise ValueError(f"SimConfig.hosts must name distinct hosts of {KNOWN_HOSTS}, not {names!r}")
        env = gpu02_env_map(rng, self.faults)
        deploy_env = {k: v for k, v in env.items() if k != "GLM53_HICACHE_RAM_BUDGET"}
        epoch = self.config.start_time or datetime.now(UTC).replace(microsecond=0)
        calls_sink = timeline_sink = None
        if self.state_dir is not None:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            calls_sink, timeline_sink = self.state_dir / "calls.jsonl", self.state_dir / "timeline.jsonl"
            for p in (calls_sink, timeline_sink):
                p.write_text("")
        self.recorder = CallRecorder(lambda: self.host.now(), sink=calls_sink)
        common: dict[str, Any] = {
            "clock": self.clock,
            "repo": repo,
            "epoch": epoch,
            "cold_start_s": self.config.cold_start_s,
            "available_ram_gib": self.config.available_ram_gib,
            "restart_delay_s": self.config.restart_delay_s,
            "discovery_cycle_s": self.config.discovery_cycle_s,
            "recorder": self.recorder,
            "fresh": self.config.fresh_host,
            "compose_version": self.config.compose_version,
            "inline_configs_ignored": self.config.inline_configs_ignored,
            "log_lines": self.config.log_lines,
        }
        self.hosts: dict[str, SimHost] = {}
        #: per host, its env map after each `set_env_var` (simulation seconds, the whole map), the
        #: map before the first change first: a compose call passes the map as it was when it was sent
        self.env_history: dict[str, list[tuple[float, dict[str, str]]]] = {}
        self._envs: dict[str, dict[str, str]] = {"gpu02": env}
        if "gpu02" in names:  # drawn first, as when gpu02 was the only host
            self.hosts["gpu02"] = SimHost(
                **common,
                faults=self.faults.for_host("gpu02", base=False),
                deploy_env=deploy_env,
                rng=random.Random(rng.random()),
                timeline_sink=timeline_sink,
                name="gpu02",
                domain=LONG_DOMAIN,
            )
        base_rng = random.Random(rng.random()) if any(n != "gpu02" for n in names) else None
        for name in names:
            if name == "gpu02" or base_rng is None:
                continue
            self._envs[name] = base_env_map(name, base_rng)
            self.hosts[name] = SimHost(
                **common,
                faults=self.faults.for_host(name, base=True),
                deploy_env=self._envs[name],
                rng=random.Random(base_rng.random()),
                name=name,
                domain=BASE_DOMAIN,
            )
        self.hosts = {n: self.hosts[n] for n in names}
        self.host = self.hosts.get("gpu02") or self.hosts[names[0]]
        self.epoch = epoch
        self._sockets = {name: _bind(reuse=False) for name in ("dashboard", "github", "registry", *PEERS)}
        self._host_sockets = {
            n: {name: _bind(reuse=False) for name in ("compose-manager", "inference", "proxy", "prometheus")}
            for n in names
        }
        self._relay_sockets = {n: {p: _bind() for p in RELAY_PORTS} for n in names}
        port = {name: s.getsockname()[1] for name, s in self._sockets.items()}

        def urls(n: str) -> FleetUrls:
            own = {name: s.getsockname()[1] for name, s in self._host_sockets[n].items()}
            return FleetUrls(
                compose_manager=f"http://{LOOPBACK}:{own['compose-manager']}",
                dashboard=f"http://{LOOPBACK}:{port['dashboard']}",
                peers={p: f"http://{LOOPBACK}:{port[p]}" for p in PEERS},
                inference=f"http://{LOOPBACK}:{own['inference']}",
                relay={p: f"http://{LOOPBACK}:{s.getsockname()[1]}" for p, s in self._relay_sockets[n].items()},
                github=f"http://{LOOPBACK}:{port['github']}",
                registry=f"http://{LOOPBACK}:{port['registry']}",
                proxy=f"http://{LOOPBACK}:{own['proxy']}",
                prometheus=f"http://{LOOPBACK}:{own['prometheus']}",
            )

        self.host_urls: dict[str, FleetUrls] = {n: urls(n) for n in names}
        self.urls = self.host_urls[self.host.name]
        self.dashboard = DashboardState(self._instances(rng))
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = threading.Event()
        self._stop_requested: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._inventory_path: Path | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    # ---------------------------------------------------------------- inspection
    @property
    def calls(self) -> list[RecordedCall]:
        return self.recorder.snapshot()

    @property
    def timeline(self) -> ServingTimeline:
        return self.host.timeline

    @property
    def dashboard_env(self) -> dict[str, str]:
        """`fleet.host`'s env map (gpu02's when simulated) as the dashboard serves it now."""
        return self.dashboard.env_vars(self.host.name)

    def host_env(self, name: str) -> dict[str, str]:
        """Host `name`'s env map as the dashboard serves it now."""
        return self.dashboard.env_vars(name)

    def set_env_var(self, key: str, value: str | None, *, host: str | None = None) -> None:
        """Change a host's env map on the dashboard (as `PUT /api/instances/{id}/env` would);
        default `fleet.host`."""
        name = host or self.host.name
        env = self.host_env(name)
        history = self.env_history.setdefault(name, [(float("-inf"), dict(env))])
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
        self.dashboard.replace_env(f"inst-{name}", env)
        history.append((self.now(), dict(env)))

    def env_at(self, name: str) -> Callable[[float], Mapping[str, str]]:
        """Host `name`'s env map as the dashboard served it at a simulation time."""
        history = self.env_history.get(name) or [(float("-inf"), self.host_env(name))]
        return lambda at: next(env for t, env in reversed(history) if t <= at)

    def now(self) -> float:
        """Simulation seconds since the fleet started."""
        return self.host.now()

    def check_invariants(
        self,
        *,
        allow_outage: bool = False,
        no_call_after: float | None = None,
        dashboard_env: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Every host's rules (`invariants.check_invariants` on that host's calls, its env map and,
        for gpu02, its replica timeline; `dashboard_env` overrides `fleet.host`'s env map), then
        the base tier's (`invariants.check_base_tier`). With several hosts, a base host's
        findings are prefixed with `[gpuNN] `. `allow_outage` disables both the replica-slot and
        the base-capacity rule."""
        calls = self.calls
        out: list[str] = []
        for name, host in self.hosts.items():
            mine = [c for c in calls if c.host == name or (not c.host and host is self.host)]
            env = dashboard_env if dashboard_env is not None and host is self.host else self.env_at(name)
            found = check_invariants(
                mine,
                dashboard_env=env,
                timeline=None if host.base else host.timeline,
                allow_outage=allow_outage,
                no_call_after=no_call_after,
            )
            out += [f"[{name}] {f}" for f in found] if host.base else found
        base = {n: h for n, h in self.hosts.items() if h.base}
        if base:
            for h in base.values():
                h.sync()
            out += check_base_tier(
                {n: list(h.domain_serving) for n, h in base.items()},
                {n: list(h.stops_while_registered) for n, h in base.items()},
                allow_outage=allow_outage,
            )
        return out

    # ---------------------------------------------------------------- lifecycle
    def __enter__(self) -> SimFleet:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self, timeout: float = 15.0) -> None:
        if self._thread is not None:
            raise RuntimeError("SimFleet already started")
        self._thread = threading.Thread(target=self._thread_main, name="sim-fleet", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout) or self._error is not None:
            self.stop()
            raise RuntimeError("the simulator did not start") from self._error

    def stop(self, timeout: float = 15.0) -> None:
        if self._thread is None:
            for sock in self._all_sockets():
                sock.close()  # never started
            return
        if self._loop is not None and self._stop_requested is not None:
            self._loop.call_soon_threadsafe(self._stop_requested.set)
        self._thread.join(timeout)
        self._thread = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def _all_sockets(self) -> list[socket.socket]:
        return [
            *self._sockets.values(),
            *(s for socks in self._host_sockets.values() for s in socks.values()),
            *(s for socks in self._relay_sockets.values() for s in socks.values()),
        ]

    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            self._error = exc
            self._started.set()

    def _apps(self) -> dict[str, ASGIApp]:
        """The shared apps by server name."""
        rec = self.recorder
        hosts = list(self.hosts.values())
        apps: dict[str, ASGIApp] = {
            "dashboard": build_dashboard_app(self.dashboard, self.tokens.dashboard),
            "github": build_github_app(self.host.repo, self.epoch, self.faults),
            "registry": build_registry_app(self.host.repo, self.faults),
        }
        for peer in PEERS:
            apps[peer] = build_model_proxy_app(hosts, peer, self.tokens.model_proxy, self.faults)
        return {name: RecordingMiddleware(app, rec, name) for name, app in apps.items()}

    def _host_apps(self, host: SimHost) -> dict[str, ASGIApp]:
        """One host's own apps by server name (their calls carry the host's name)."""
        rec = self.recorder
        apps: dict[str, ASGIApp] = {
            "compose-manager": build_compose_manager_app(host, self.tokens.compose_manager, host.faults, rec),
            "inference": build_inference_app(host, self.tokens.inference, rec),
            "proxy": build_host_proxy_app(host),
            "prometheus": build_prometheus_app(host, lambda: list(self.hosts.values())),
        }
        return {name: RecordingMiddleware(app, rec, name, host.name) for name, app in apps.items()}

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_requested = asyncio.Event()
        apps = self._apps()
        listeners = [_Listener(apps[name], sock) for name, sock in self._sockets.items()]
        relays: dict[str, dict[int, _Listener]] = {}
        for n, host in self.hosts.items():
            own = self._host_apps(host)
            listeners += [_Listener(own[name], sock) for name, sock in self._host_sockets[n].items()]
            relays[n] = {
                port: _Listener(
                    RecordingMiddleware(build_relay_app(host, port, self.recorder), self.recorder, f"relay:{port}", n),
                    sock,
                )
                for port, sock in self._relay_sockets[n].items()
            }
        for listener in listeners:
            listener.start()
        self._sync_relays(relays)
        for n, host in self.hosts.items():
            host.settle_listeners = functools.partial(self._settle_relays, {n: relays[n]})  # type: ignore[attr-defined]  # set on the host after it is built (the fleet owns the relays)
        every = [*listeners, *(r for per_host in relays.values() for r in per_host.values() if r.open)]
        while not all(lst.server is not None and lst.server.started for lst in every):
            if any(lst.task is not None and lst.task.done() for lst in every):
                raise RuntimeError("a simulator server failed to start")
            await asyncio.sleep(TICK_S)
        self._started.set()
        try:
            while not self._stop_requested.is_set():
                for host in self.hosts.values():
                    host.sync()
                self._sync_relays(relays)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop_requested.wait(), TICK_S)
        finally:
            await asyncio.gather(
                *(lst.stop(reserve=False) for lst in [*listeners, *(r for per_host in relays.values() for r in per_host.values())]),
                return_exceptions=True,
            )
            for per_host in relays.values():
                for relay in per_host.values():
                    relay.release_unused_socket()

    async def _settle_relays(self, relays: dict[str, dict[int, _Listener]], cap_s: float = 5.0) -> None:
        """Open (or close) these relays' ports as their container now is, and wait (real time,
        at most `cap_s`) until they listen (or are closed): a compose call's answer ends after it."""
        deadline = time.monotonic() + cap_s
        while True:
            self._sync_relays(relays)
            pending = []
            for n, per_host in relays.items():
                listening = self.hosts[n].relay_listening()
                for relay in per_host.values():
                    if listening and not (relay.server is not None and relay.server.started):
                        pending.append(relay)
                    elif not listening and (relay.open or relay.task is not None):
                        pending.append(relay)
            if not pending or time.monotonic() >= deadline:
                return
            await asyncio.sleep(TICK_S)

    def _sync_relays(self, relays: dict[str, dict[int, _Listener]]) -> None:
        for n, per_host in relays.items():
            listening = self.hosts[n].relay_listening()
            for relay in per_host.values():
                if listening and not relay.open:
                    relay.start()
                elif not listening and relay.open:
                    asyncio.ensure_future(relay.stop())
