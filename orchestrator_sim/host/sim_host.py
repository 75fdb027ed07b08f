"""A simulated host (gpu02, or a base-tier host gpu03/gpu04/gpu23): its containers, engines, docker compose and registrar, as a discrete-event
simulation on the simulator's clock.

Everything that happens is an event at an exact simulation time (the sim clock's `monotonic()`
seconds); `sync()` runs every event that is due. Timestamps, the serving timeline and docker's
durations therefore do not depend on when anyone looks. All public methods are thread-safe (the
servers run in their own thread, tests inspect from theirs).

The host is assembled from its parts: core.py (time, containers, engines, docker's view:
state.py, engines.py, services.py, docker.py),
compose_manager/ops.py (compose-manager's docker compose) and serving.py (registrar, inference, relay).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from threading import RLock
from typing import Any

from orchestrator.util.clock import Clock
from orchestrator_sim.compose_manager.ops import IMAGE, ComposeOperations, Operation, OrphanRemoval, WorkCopy
from orchestrator_sim.compose_manager.repo import (
    BASE_TARGET_FILE,
    REGISTRAR_SERVICE,
    TARGET_FILE,
    SimRepository,
    inline_config_changes_ignored,
    load_compose,
)
from orchestrator_sim.faults import ActiveFaults
from orchestrator_sim.host import sglang_log
from orchestrator_sim.host.containers import BASE_DOMAIN, COMPOSE_VERSION, HOST_IP, LONG_DOMAIN, Container
from orchestrator_sim.host.core import DOWNLOADER_RUN_S, NOISE_INTERVAL_S, REGISTER_LOOP_S
from orchestrator_sim.host.engine_cache import PrefixCache
from orchestrator_sim.host.hicache_budget import GIB, resolve_budget
from orchestrator_sim.host.serving import ServingPaths
from orchestrator_sim.record.calls import CallRecorder
from orchestrator_sim.record.timeline import SLOTS, ServingTimeline

# MemAvailable when the canary's FP8 r2 started was this much below the boot figure (page cache):
# with 1223 GiB at boot its 80% budget logs rank_budget_bytes=262552089395, as gpu02's did.
BOOT_NOISE_BYTES = 425_803_777


class SimHost(ComposeOperations, ServingPaths):
    def __init__(
        self,
        *,
        clock: Clock,
        repo: SimRepository,
        faults: ActiveFaults,
        deploy_env: Mapping[str, str],
        epoch: datetime,
        rng: random.Random,
        cold_start_s: float = 3000.0,
        available_ram_gib: float = 1223,
        restart_delay_s: float = 30.0,
        discovery_cycle_s: float = 90.0,
        recorder: CallRecorder | None = None,
        timeline_sink: Path | None = None,
        fresh: bool = False,
        name: str = "gpu02",
        domain: str = LONG_DOMAIN,
        compose_version: str = COMPOSE_VERSION,
        inline_configs_ignored: bool | None = None,
        log_lines: int | None = None,
    ) -> None:
        """`fresh`: a host where nothing was ever deployed (only compose-manager's start in the
        action log), as the recorded 8e07c35 exchanges begin; default: the canary deployed
        (gpu02) or, for a host of the base `domain`, the canonical FP8 file at
        BASE_PREVIOUS_TAG (the repository's `base_initial_deployment`).

        `domain` decides the host's role: gpu02 serves the long domain (its registrar is listed
        a discovery cycle after it starts, as before); a base-domain host's registrar, drain and
        downloader are simulated step by step (services.py) and its rollout file is the
        W4AFP8 base-tier file.

        `log_lines`: docker's log rotation, every container keeps only its last N lines (an
        engine that has run for days has logged far more than that since its ready line)."""
        if log_lines is not None and log_lines < 1:
            raise ValueError(f"log_lines must be a positive number of lines, not {log_lines!r}")
        self.log_lines = log_lines
        self._lock = RLock()
        self.clock = clock
        self.name = name
        self.compose_version = compose_version
        # compose's behaviour for that release (docker/compose#11900) unless a test says otherwise
        self.inline_configs_ignored = (
            inline_config_changes_ignored(compose_version) if inline_configs_ignored is None else inline_configs_ignored
        )
        self.domain = domain
        self.base = domain == BASE_DOMAIN
        self.target_file = BASE_TARGET_FILE if self.base else TARGET_FILE
        self.host_ip = deploy_env.get("HOST_IP", HOST_IP)
        self._registered = False
        self._unregistered_at = None
        self.stops_while_registered = []
        self._spent_faults = set()
        self._removed_logs = {}
        self.repo = repo.for_base_host() if self.base else repo
        self.faults = faults
        self.epoch = epoch
        self.rng = rng
        self.cold_start_s = float(cold_start_s)
        self.available_bytes = int(available_ram_gib * GIB)
        self.restart_delay_s = restart_delay_s
        self.discovery_cycle_s = discovery_cycle_s
        self.recorder = recorder
        self._now = 0.0
        self._events: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = itertools.count()
        self._containers: dict[str, Container] = {}  # by container name
        self._images: set[str] = set()
        self._actions: list[dict[str, Any]] = []
        self._last_up: dict[str, Any] | None = None
        self._deployed: dict[str, dict[str, dict[str, Any]]] = {}
        self._work_dir: dict[str, WorkCopy] = {}
        self._orphans: list[OrphanRemoval] = []
        self._op: Operation | None = None
        #: (lock calls it still refuses, simulated time it ends at, what) of the `lock-after-down`
        #: fault: another client holds the lock
        self._held_by_other: tuple[int, float, dict[str, Any]] | None = None
        self._sidecar_busy_since: float | None = None  # `sidecar-down-busy`: its first refusal
        self._round_robin = -1
        if fresh:
            self._actions.append(self._started_entry(0.0))
        else:
            self._build_initial_state(deploy_env)
        self.timeline = ServingTimeline({slot: self._slot_state(slot) for slot in SLOTS}, sink=timeline_sink)
        self.domain_serving = [(0.0, self._domain_serving_now())]

    def _started_entry(self, at: float) -> dict[str, Any]:
        return {"timestamp": self.stamp(at), "action": "compose_manager_started", "container": "compose-manager", "image": IMAGE}

    def _build_initial_state(self, deploy_env: Mapping[str, str]) -> None:
        if self.repo.initial_actions:
            self._actions.append(self._started_entry(-max(a.hours_ago for a in self.repo.initial_actions) * 3600.0 - 60.0))
        for action in self.repo.initial_actions:
            info = self.repo.tag(action.tag)
            text = self.repo.file_text(action.tag, action.file)
            assert info is not None and text is not None, action
            cf = load_compose(text, deploy_env, path=action.file, tag=action.tag, commit=info.commit)
            t0 = -action.hours_ago * 3600.0
            for name in cf.closure(list(action.services)):
                sd = cf.services[name]
                self._images.add(sd.image)
                c = self._new_container(sd, cf, self.repo.initial_project, created_at=t0)
                c.state = "running"
                c.started_at = t0 + 5.0
                self._containers[c.name] = c
                if c.kind == "oneshot":
                    c.log += self._downloader_lines(t0 + 5.0)
                    c.state, c.finished_at, c.exit_code = "exited", t0 + 5.0 + DOWNLOADER_RUN_S, 0
                elif c.engine is not None:
                    self._initial_engine_log(c, t0 + 30.0)
                else:
                    c.log += self._service_start_lines(c, t0 + 5.0)
                    if c.service == REGISTRAR_SERVICE and self.base:  # registered long ago
                        ip = c.env.get("HOST_IP", self.host_ip)
                        c.log += [
                            "Model ready, starting registration loop",
                            f"Registering endpoint {ip}:8000 with routing port 8444",
                            f"[GLM-5.3-Flash-SGL-TP4] Registered z-ai/glm-5.3-flash (2x TP4/EP4) at {ip}:8000",
                        ]
                        self._registered = True
                        self._schedule(self.rng.uniform(1.0, REGISTER_LOOP_S), self._registrar_tick, c, c.run, 0, True)
                    elif c.service == REGISTRAR_SERVICE:
                        c.log += self._registrar_lines(c)
            entry = self._action_entry(
                action.action, tag=cf.tag, commit=cf.commit, file=cf.path, sha256=cf.sha256,
                services=list(action.services), at=t0 + 1.0,
            )
            self._actions.append(entry)
            self._work_dir[action.file] = WorkCopy(action.file, action.tag, info.commit, text, cf.sha256)
            if action.action == "compose_up":
                self._last_up = entry
                slot = self._deployed.setdefault(self.repo.initial_project, {})
                if slot.get("current"):
                    slot["previous"] = slot["current"]
                slot["current"] = {k: entry[k] for k in ("tag", "commit", "file", "file_sha256")}

    def _initial_engine_log(self, c: Container, t0: float) -> None:
        """An engine that started long ago: its whole startup, as the default cold start took it."""
        assert c.engine is not None
        c.started_at = t0
        default_cold = 3000.0
        for step, frac in sglang_log.MILESTONES:
            ts = self.wall(t0 + frac * default_cold)
            if step == "hicache":
                if c.engine.hicache:
                    avail = self.available_bytes - BOOT_NOISE_BYTES - self._booked(exclude=c)
                    budget = resolve_budget(c.env["SGLANG_HICACHE_RAM_BUDGET"], avail)
                    c.engine.booked_bytes = budget.replica_bytes
                    c.log += sglang_log.hicache_budget_lines(ts, budget.text, budget.rank_bytes)
                    c.log += sglang_log.hicache_allocated_lines(ts)
                continue
            c.log += self._engine_step_lines(c, step, ts)
        c.engine.ready = True
        c.engine.cache = PrefixCache(hicache=c.engine.hicache)
        if self.log_lines is not None:
            # its days of steady-state chatter since the ready line, as far back as the rotated
            # window reaches (each turn logs at least two lines)
            ready_at = t0 + default_cold
            turns = min(int((-600.0 - ready_at) // NOISE_INTERVAL_S), self.log_lines // 2 + 1)
            for k in range(turns, 0, -1):
                c.log += sglang_log.noise_lines(self.wall(-600.0 - NOISE_INTERVAL_S * k), self.rng)
        for k in range(3):
            c.log += sglang_log.noise_lines(self.wall(-600.0 + 200.0 * k), self.rng)
        self._append(c, [])  # the rotation's cut
        self._schedule(NOISE_INTERVAL_S, self._engine_noise, c, c.run)
