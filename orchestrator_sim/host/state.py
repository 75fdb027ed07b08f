"""The simulated host's state and the primitives every part of it uses: simulation time and the
event queue, a base host's place in its domain (registered, serving, its engines' load), creating
a container from its service, appending to a log, the GPU memory booked, and the replica slots'
serving timeline. The parts (engines.py, services.py, docker.py) build on it;
core.py's HostCore assembles them with the containers' lifecycle."""

from __future__ import annotations

import hashlib
import heapq
import math
import random
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from threading import RLock
from typing import TYPE_CHECKING, Any

from orchestrator.util.clock import Clock
from orchestrator_sim.compose_manager.repo import (
    NGINX_SERVICE,
    PROXY_SERVICE,
    RELAY_SERVICE,
    ComposeFile,
    ServiceDef,
    SimRepository,
)
from orchestrator_sim.faults import ActiveFaults
from orchestrator_sim.host.containers import (
    CONFIG_DIR,
    Container,
    EngineRun,
)
from orchestrator_sim.record.calls import CallRecorder
from orchestrator_sim.record.timeline import ServingTimeline

if TYPE_CHECKING:
    from orchestrator_sim.compose_manager.records import Operation, OrphanRemoval

ORPHAN_STOP_TIMEOUT_S = 10.0
DOWNLOADER_RUN_S = 20.0
PERCEPTION_RUN_S = 120.0
NOISE_INTERVAL_S = 120.0
REGISTRAR_HEALTH_START_S = 30.0
LOG_CAP = 20_000
# A base host's registrar (its script in the canonical/W4AFP8 files): readiness probe every 30 s,
# at most 30 tries; then a registration loop every 60 s that gives up after 3 failed checks.
READY_PROBE_S = 30.0
READY_ATTEMPTS = 30
REGISTER_LOOP_S = 60.0
REGISTER_MAX_RETRIES = 3
UNREGISTER_S = 0.3  # the trap's curl to model-proxy's /unregister/endpoint
# A base host's downloader: the three `hf download` runs (snapshots already cached: verification)
BASE_DOWNLOAD_STEPS_S = (70.0, 15.0, 150.0)
# sglang:num_running_reqs on a base engine: LOAD_MIN..LOAD_MAX while the host is registered, then
# an exponential decay (time constant DRAIN_TAU_S); r1 keeps one pinned HTTP/2 request for
# DRAIN_TRICKLE_S. The drain-stuck fault holds it at DRAIN_STUCK_REQS.
LOAD_MIN, LOAD_MAX = 5, 20
DRAIN_TAU_S = 25.0
DRAIN_TRICKLE_S = 300.0
DRAIN_STUCK_REQS = 6


class HostState:
    """State and primitives shared by the host's parts. SimHost (sim_host.py) builds it."""

    _lock: RLock
    clock: Clock
    repo: SimRepository
    faults: ActiveFaults
    epoch: datetime
    rng: random.Random
    cold_start_s: float
    available_bytes: int
    restart_delay_s: float
    discovery_cycle_s: float
    recorder: CallRecorder | None
    timeline: ServingTimeline
    name: str  # gpu02, gpu03, ...
    compose_version: str  # docker compose's release on the host (docker ps: com.docker.compose.version)
    inline_configs_ignored: bool  # a change of inline `configs:` content alone recreates nothing (#11900)
    log_lines: int | None  # docker's log rotation: each container keeps its last N lines (None: LOG_CAP)
    domain: str  # the model-proxy domain its registrar registers under
    base: bool  # a base-tier host: its registrar and downloader are simulated step by step
    target_file: str  # the rollout's new file on this host (engine faults hit its engines)
    host_ip: str
    _registered: bool  # base host: listed by model-proxy (the registrar registered, not unregistered)
    _unregistered_at: float | None
    domain_serving: list[tuple[float, bool]]  # base host: (t, registered and serving) transitions
    stops_while_registered: list[tuple[float, str]]  # base host: engines stopped while registered
    _spent_faults: set[tuple[str, str]]
    _removed_logs: dict[str, list[str]]
    _now: float
    _events: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]]
    _containers: dict[str, Container]
    _images: set[str]
    _actions: list[dict[str, Any]]
    _last_up: dict[str, Any] | None
    _deployed: dict[str, dict[str, dict[str, Any]]]
    _work_dir: dict[str, Any]
    _orphans: list[OrphanRemoval]
    _op: Operation | None
    _held_by_other: tuple[int, dict[str, Any]] | None
    _sidecar_busy_since: float | None
    _round_robin: int

    def sync(self) -> float:
        """Run every event that is due on the clock; returns the simulation time."""
        with self._lock:
            self._advance(self.clock.monotonic())
            return self._now

    def now(self) -> float:
        return self.sync()

    def wall(self, t: float | None = None) -> datetime:
        return self.epoch + timedelta(seconds=self._now if t is None else t)

    def stamp(self, t: float | None = None) -> str:
        """compose-manager's timestamp: RFC 3339 with nanoseconds, `2026-11-30T20:01:45.058882954+00:00`."""
        t = self._now if t is None else t
        ns = round(t * 1_000_000_000)
        whole, frac = divmod(ns, 1_000_000_000)
        return (self.epoch + timedelta(seconds=whole)).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:09d}+00:00"

    def _advance(self, until: float) -> None:
        while self._events and self._events[0][0] <= until:
            t, _, fn, args = heapq.heappop(self._events)
            self._now = max(self._now, t)
            fn(*args)
            self._note_domain_serving()
        self._now = max(self._now, until)

    # -- a base host's place in its domain ------------------------------------------------
    def _domain_serving_now(self) -> bool:
        """Registered AND the pooled endpoint answers (nginx, proxy-glm53, a ready engine), and
        not marked unhealthy by the `host-unhealthy` fault."""
        return self._registered and self._serving_path_ok() and not self.faults.active("host-unhealthy")

    def _note_domain_serving(self) -> None:
        if not self.base or not hasattr(self, "domain_serving"):
            return
        serving = self._domain_serving_now()
        if self.domain_serving[-1][1] != serving:
            self.domain_serving.append((self._now, serving))

    def _serving_path_ok(self) -> bool:
        nginx = self._containers.get(NGINX_SERVICE)
        proxy = self._containers.get(PROXY_SERVICE)
        if not (nginx and nginx.up and proxy and proxy.up):
            return False
        return any((e := self._containers.get(name)) is not None and e.ready for name in proxy.proxy_pool)

    def _set_registered(self, registered: bool) -> None:
        if registered == self._registered:
            return
        self._registered = registered
        self._unregistered_at = None if registered else self._now
        self._note_domain_serving()

    def running_requests(self, c: Container) -> int:
        """The engine's sglang:num_running_reqs. gpu02: 0 (never simulated). A base host: 5-20
        while registered and the engine is in proxy-glm53's pool; after the unregister the
        load decays to 0 within ~2 minutes, r1 keeping 1 pinned request for 5 minutes."""
        if not self.base or c.engine is None or not c.ready:
            return 0
        proxy = self._containers.get(PROXY_SERVICE)
        if proxy is None or c.name not in proxy.proxy_pool:
            return 0
        if self._registered:
            bucket = int(self._now // 15)  # a new value every scrape interval
            h = int(hashlib.sha256(f"{c.name}:{bucket}".encode()).hexdigest()[:8], 16)
            return LOAD_MIN + h % (LOAD_MAX - LOAD_MIN + 1)
        if self._unregistered_at is None:
            return 0
        if self.faults.active("drain-stuck"):
            return DRAIN_STUCK_REQS
        dt = self._now - self._unregistered_at
        decayed = int(12 * math.exp(-dt / DRAIN_TAU_S))
        trickle = 1 if c.slot == "r1" and dt < DRAIN_TRICKLE_S else 0
        return max(decayed, trickle)

    def _schedule(self, delay: float, fn: Callable[..., None], *args: Any) -> None:
        heapq.heappush(self._events, (self._now + max(0.0, delay), next(self._seq), fn, args))

    def _new_id(self) -> str:
        return "".join(self.rng.choice("0123456789abcdef") for _ in range(12))

    def _new_container(self, sd: ServiceDef, cf: ComposeFile, project: str, *, created_at: float) -> Container:
        depends = ",".join(f"{d}:{cond}:false" for d, cond in sd.depends_on.items())
        labels = {
            "com.docker.compose.config-hash": sd.config_hash,
            "com.docker.compose.container-number": "1",
            "com.docker.compose.depends_on": depends,
            "com.docker.compose.image": "sha256:" + hashlib.sha256(sd.image.encode()).hexdigest(),
            "com.docker.compose.oneoff": "False",
            "com.docker.compose.project": project,
            "com.docker.compose.project.config_files": f"{CONFIG_DIR}/{cf.path}",
            "com.docker.compose.project.working_dir": CONFIG_DIR,
            "com.docker.compose.service": sd.name,
            "com.docker.compose.version": self.compose_version,
            **sd.labels,
        }
        if sd.is_engine:
            kind = "engine"
        elif sd.name == RELAY_SERVICE:
            kind = "relay"
        elif sd.is_oneshot:
            kind = "oneshot"
        else:
            kind = "service"
        c = Container(
            id=self._new_id(),
            name=sd.container_name,
            service=sd.name,
            project=project,
            image=sd.image,
            config_hash=sd.config_hash,
            tag=cf.tag,
            file=cf.path,
            created_at=created_at,
            labels=labels,
            env=dict(sd.environment),
            command=sd.command,
            restart_policy=sd.restart,
            kind=kind,
            has_healthcheck=sd.has_healthcheck,
            gpus=sd.device_ids,
            ports=sd.ports,
            content_hash=sd.content_hash,
        )
        if kind == "engine":
            # an engine of the initial deployment (created before t=0) is never a rollout's new engine
            fault = self.faults.engine_fault(sd.slot) if cf.path == self.target_file and created_at >= 0 else None
            if fault == "dist-store-error":  # only the first container of that service fails
                if (fault, sd.name) in self._spent_faults:
                    fault = None
                else:
                    self._spent_faults.add((fault, sd.name))
            c.engine = EngineRun(slot=sd.slot, hicache=sd.is_hicache, fault=fault)
            if fault == "labels-wrong":
                c.labels = stale_config_variant(c.labels)
        if kind == "relay":
            c.relay_routes = cf.relay_routes(sd.name)
            token = re.search(r'"Bearer ([^"]+)"', "".join(cf.configs.get(s, "") for s in sd.config_sources))
            c.relay_token = token.group(1) if token else None
        if sd.name == PROXY_SERVICE:
            c.proxy_pool = cf.proxy_pool(sd.name)
        return c

    def _append(self, c: Container, lines: list[str]) -> None:
        c.log.extend(lines)
        cap = min(LOG_CAP, self.log_lines) if self.log_lines is not None else LOG_CAP
        if len(c.log) > cap:
            del c.log[: len(c.log) - cap]

    def _booked(self, exclude: Container | None = None) -> int:
        return sum(
            c.engine.booked_bytes
            for c in self._containers.values()
            if c.engine is not None and c is not exclude and c.state == "running"
        )

    def _slot_state(self, slot: str) -> tuple[bool, str]:
        ready = [c.name for c in self._containers.values() if c.slot == slot and c.ready]
        return (bool(ready), ready[0] if ready else "")

    def _update_slot(self, slot: str | None, container: str, reason: str) -> None:
        if slot is None or not hasattr(self, "timeline"):
            return
        serving, _ = self._slot_state(slot)
        self.timeline.record(self._now, slot, serving, container, reason)


def stale_config_variant(labels: dict[str, str]) -> dict[str, str]:
    """The labels-wrong fault: every config_variant (label and log tag) replaced by a stale one."""
    out = dict(labels)
    old = out.get("nearai.otel.config_variant")
    if old:
        stale = old.split("-", 1)[0] + "-canary-stale"
        out["nearai.otel.config_variant"] = stale
        for k, v in out.items():
            if "config_variant:" in v:
                out[k] = v.replace(f"config_variant:{old}", f"config_variant:{stale}")
    return out
