"""The core of the simulated host: simulation time, containers and their lifecycle (start, exit,
restart policy, stop), the engines' cold start, and what docker shows of them."""

from __future__ import annotations

import hashlib
import heapq
import json
import math
import random
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from threading import RLock
from typing import TYPE_CHECKING, Any

from orchestrator.util.clock import Clock
from orchestrator_sim import docker_format, sglang_log
from orchestrator_sim.compose_repo import (
    DOWNLOADER_SERVICE,
    NGINX_SERVICE,
    PROXY_SERVICE,
    REGISTRAR_SERVICE,
    RELAY_SERVICE,
    ComposeFile,
    ServiceDef,
    SimRepository,
)
from orchestrator_sim.containers import (
    CONFIG_DIR,
    HOST_IP,
    MODEL_PROXY_PORT,
    PROJECT,
    SERVED_MODEL,
    Container,
    ContainerView,
    EngineRun,
)
from orchestrator_sim.engine_cache import PrefixCache
from orchestrator_sim.faults import ActiveFaults
from orchestrator_sim.hicache_budget import RESERVE_BYTES, BudgetError, resolve_budget
from orchestrator_sim.recording import CallRecorder
from orchestrator_sim.timeline import SLOTS, ServingTimeline

if TYPE_CHECKING:
    from orchestrator_sim.compose_records import Operation, OrphanRemoval

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


class HostCore:
    """State and primitives shared by the host's parts. SimHost (host.py) builds it."""

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

    def _start(self, c: Container) -> None:
        c.state = "running"
        c.started_at = self._now
        c.finished_at = None
        c.stopping = False
        c.user_stopped = False
        c.run += 1
        run = c.run
        if c.engine is not None:
            c.engine.ready = False
            c.engine.booked_bytes = 0
            c.engine.cache = PrefixCache(hicache=c.engine.hicache)
            self._engine_step(c, run, 0)
        elif c.kind == "oneshot":
            self._oneshot_start(c, run)
        else:
            self._append(c, self._service_start_lines(c, self._now))
            if c.service == REGISTRAR_SERVICE and self.base:
                self._schedule(0.0, self._registrar_probe, c, run, 0)
            elif c.service == REGISTRAR_SERVICE:
                self._schedule(self.discovery_cycle_s, self._registrar_registered, c, run)

    def _exit(self, c: Container, code: int) -> None:
        """The container's process ended (crash, one-shot completion, or a stop)."""
        was_ready = c.ready
        c.state = "exited"
        c.finished_at = self._now
        c.exit_code = code
        c.stopping = False
        c.run += 1
        if c.engine is not None:
            c.engine.ready = False
            c.engine.booked_bytes = 0
            if was_ready:
                self._update_slot(c.slot, c.name, f"exited ({code})")
        restart = c.restart_policy in ("always", "unless-stopped") or (
            c.restart_policy.startswith("on-failure") and code != 0
        )
        if restart and not c.user_stopped:
            c.state = "restarting"
            self._schedule(self.restart_delay_s, self._restart, c, c.run)

    def _restart(self, c: Container, run: int) -> None:
        if c.run != run or c.state != "restarting" or c.name not in self._containers:
            return
        c.restart_count += 1
        self._start(c)

    def _begin_stop(self, c: Container, timeout: float) -> tuple[float, int]:
        """Send SIGTERM; returns (seconds until the process is gone, its exit code)."""
        c.user_stopped = True
        if c.state == "restarting":
            c.state = "exited"
            c.run += 1
            return 0.0, c.exit_code
        if c.state != "running":
            return 0.0, c.exit_code
        c.stopping = True
        c.run += 1  # pending startup/noise events are void
        if c.engine is not None and self.base and self._registered:
            self.stops_while_registered.append((self._now, c.name))
        if c.service == REGISTRAR_SERVICE and self.base:  # its trap: unregister, then exit 0
            ip = c.env.get("HOST_IP", self.host_ip)
            self._append(c, [f"SIGTERM received, unregistering {ip}:8000", f"Unregistering endpoint {ip}:8000"])
            self._schedule(UNREGISTER_S, self._set_registered, False)
        if c.engine is not None:
            was_ready = c.ready
            c.engine.ready = False
            self._append(c, sglang_log.sigterm_lines(self.wall()))
            if was_ready:
                self._update_slot(c.slot, c.name, "stopping")
            return timeout, 137  # an engine drains until docker kills it
        return min(timeout, 1.0), 0

    def _finish_stop(self, c: Container, code: int) -> None:
        if c.state == "running":
            self._exit(c, code)

    def _remove(self, c: Container) -> None:
        self._containers.pop(c.name, None)
        self._removed_logs[c.name] = c.log  # docker forgets it; tests may still read it
        c.run += 1
        c.state = "removed"

    def _engine_step(self, c: Container, run: int, index: int) -> None:
        if c.run != run or c.state != "running" or c.engine is None:
            return
        step, frac = sglang_log.MILESTONES[index]
        ts = self.wall()
        fault = c.engine.fault
        if step == "dist" and fault == "dist-store-error":  # the ranks hang: no exit, no more lines
            dist = re.search(r"--dist-init-addr\s+(\S+)", c.command)
            self._append(c, sglang_log.dist_lines(ts, self.rng)[:4])
            self._append(c, sglang_log.dist_store_error_lines(ts, dist.group(1) if dist else ""))
            return
        if step == "dist" and fault == "restart-loop":
            self._append(c, sglang_log.dist_lines(ts, self.rng)[:4] + sglang_log.nccl_error_lines(ts))
            self._exit(c, 1)
            return
        if step == "load_begin" and any(  # another engine still holds this replica's GPUs
            o is not c and o.engine is not None and o.slot is not None and o.slot == c.slot and o.state == "running"
            for o in self._containers.values()
        ):
            self._append(c, sglang_log.gpu_busy_oom_lines(ts))
            self._exit(c, 1)
            return
        if step == "hicache":
            if c.engine.hicache and not self._engine_hicache(c, ts):
                return
        elif step == "graph_end" and fault == "oom":
            self._append(c, sglang_log.oom_lines(ts))
            self._exit(c, 1)
            return
        else:
            self._append(c, self._engine_step_lines(c, step, ts))
        if step == "graph_begin" and fault == "cold-start-hang":
            return  # never another line
        if step == "ready":
            c.engine.ready = True
            c.engine.ready_at = self._now
            self._update_slot(c.slot, c.name, "ready")
            self._schedule(NOISE_INTERVAL_S, self._engine_noise, c, run)
            return
        next_frac = sglang_log.MILESTONES[index + 1][1]
        self._schedule((next_frac - frac) * self.cold_start_s, self._engine_step, c, run, index + 1)

    def _engine_step_lines(self, c: Container, step: str, ts: datetime) -> list[str]:
        if step == "args":
            model = re.search(r"--model-path\s+(\S+)", c.command)
            dist = re.search(r"--dist-init-addr\s+(\S+)", c.command)
            return sglang_log.args_lines(
                ts, SERVED_MODEL, model.group(1) if model else "", dist.group(1) if dist else ""
            )
        return {
            "dist": lambda: sglang_log.dist_lines(ts, self.rng),
            "load_begin": lambda: sglang_log.load_begin_lines(ts, self.rng),
            "load_end": lambda: sglang_log.load_end_lines(ts, self.rng),
            "kv": lambda: sglang_log.kv_lines(ts),
            "graph_begin": lambda: sglang_log.graph_begin_lines(ts),
            "graph_end": lambda: sglang_log.graph_end_lines(ts, self.rng),
            "uvicorn": lambda: sglang_log.uvicorn_lines(ts),
            "ready": lambda: sglang_log.ready_lines(ts),
        }[step]()

    def _engine_hicache(self, c: Container, ts: datetime) -> bool:
        """Resolve and allocate the HiCache host budget; False if the engine failed."""
        assert c.engine is not None
        text = c.env.get("SGLANG_HICACHE_RAM_BUDGET", "")
        available = self.available_bytes - self._booked(exclude=c)
        try:
            budget = resolve_budget(text, available)
        except BudgetError:
            self._append(c, sglang_log.budget_invalid_lines(ts, text))
            self._exit(c, 1)
            return False
        logged = budget.rank_bytes
        if c.engine.fault == "rank-budget-wrong":
            wrong_text = text.replace("GiB", "GB").replace("gib", "GB")
            logged = resolve_budget(wrong_text, available).rank_bytes if wrong_text != text else budget.replica_bytes
        self._append(c, sglang_log.hicache_budget_lines(ts, text, logged))
        if c.engine.fault == "cuda-801":
            self._append(c, sglang_log.cuda_801_lines(ts))
            self._exit(c, 1)
            return False
        if not budget.fits:
            self._append(c, sglang_log.budget_no_fit_lines(ts, budget.replica_bytes, available, RESERVE_BYTES))
            self._exit(c, 1)
            return False
        c.engine.booked_bytes = budget.replica_bytes
        self._append(c, sglang_log.hicache_allocated_lines(ts))
        return True

    def _engine_noise(self, c: Container, run: int) -> None:
        if c.run != run or not c.ready or c.name not in self._containers:
            return
        self._append(c, sglang_log.noise_lines(self.wall(), self.rng))
        self._schedule(NOISE_INTERVAL_S, self._engine_noise, c, run)

    def _downloader_lines(self, t: float) -> list[str]:
        return [
            "Downloading zai-org/GLM-5.3-Flash...",
            "Fetching 53 files: 100%|██████████| 53/53 [00:00<00:00, 1402.61it/s]",
            "/root/.cache/huggingface/hub/models--zai-org--GLM-5.3-Flash/snapshots/84c6a6aa9497188e15a635ba793b0f95a79b1033",
            "Downloading corrected GLM-5.3-Flash chat template...",
            "/root/.cache/huggingface/hub/models--zai-org--GLM-5.3-Flash/snapshots/3f1971b7b5f7a528c9c4ef6212c8785298a8c24a/chat_template.jinja",
            "Downloading graphistry/GLM-5.3-Flash-W4AFP8...",
            "Fetching 41 files: 100%|██████████| 41/41 [00:00<00:00, 1177.30it/s]",
            "/root/.cache/huggingface/hub/models--graphistry--GLM-5.3-Flash-W4AFP8/snapshots/99f1fa70408c52b007d4fd69e02e5a522422e755",
            "Download complete.",
        ]

    def _oneshot_start(self, c: Container, run: int) -> None:
        if c.service == DOWNLOADER_SERVICE and self.base:
            self._downloader_step(c, run, 0)
        elif c.service == DOWNLOADER_SERVICE:
            self._append(c, self._downloader_lines(self._now))
            self._schedule(DOWNLOADER_RUN_S, self._oneshot_exit, c, run, 0)
        elif c.service == "glm53-perception-check":
            both = self._perception_targets_ready(c) and not self.faults.active("perception-fails")
            self._append(c, [json.dumps({"event": "disk", "free_bytes": 412316860416})])
            self._schedule(PERCEPTION_RUN_S, self._perception_done, c, run, both)
        elif c.service == "hf-cleanup":
            if not c.env.get("MODEL_NAME"):
                self._append(c, ["sh: MODEL_NAME: MODEL_NAME env var is required (e.g. zai-org/GLM-5-FP8)"])
                self._schedule(1.0, self._oneshot_exit, c, run, 1)
            else:
                self._append(c, ["=== Disk usage ===", "Not found — nothing to remove."])
                self._schedule(3.0, self._oneshot_exit, c, run, 0)
        else:
            self._schedule(5.0, self._oneshot_exit, c, run, 0)

    def _downloader_step(self, c: Container, run: int, step: int) -> None:
        """A base host's downloader, one `hf download` at a time (`set -e`: the first failure
        ends the script with its exit code)."""
        if c.run != run or c.state != "running":
            return
        lines = self._downloader_lines(self._now)
        # chunk k: what the script has printed when its k-th `hf download` starts (or ends)
        cuts = [0] + [i + 1 for i, line in enumerate(lines) if line.startswith("Downloading ")] + [len(lines)]
        if step == 1 and self.faults.active("downloader-fails"):
            self._append(c, [
                "huggingface_hub.errors.HfHubHTTPError: 401 Client Error: Unauthorized for url: "
                "https://huggingface.co/api/models/zai-org/GLM-5.3-Flash/revision/84c6a6aa9497188e15a635ba793b0f95a79b1033",
                "Invalid credentials in Authorization header",
            ])
            self._oneshot_exit(c, run, 1)
            return
        self._append(c, lines[cuts[step] : cuts[step + 1]])
        if step + 2 == len(cuts):
            self._oneshot_exit(c, run, 0)
            return
        self._schedule(BASE_DOWNLOAD_STEPS_S[step], self._downloader_step, c, run, step + 1)

    def _perception_targets_ready(self, c: Container) -> bool:
        """Both replicas the check probes are ready: the engine names come from its command
        (`http://<prefix>r{replica}:8000`, or the canary's `(1, "<name>"), (2, "<name>")` pairs),
        else (not found) both slots."""
        m = re.search(r"http://([A-Za-z0-9_.-]+)r\{replica\}:8000", c.command)
        names = [f"{m.group(1)}r{i}" for i in (1, 2)] if m else re.findall(r'\(\d, "([A-Za-z0-9_.-]+)"\)', c.command)
        if not names:
            return all(self._slot_state(s)[0] for s in SLOTS)
        return all((e := self._containers.get(name)) is not None and e.ready for name in names)

    # -- a base host's registrar (the canonical file's register.sh, step by step)
    def _registrar_probe(self, c: Container, run: int, attempt: int) -> None:
        """`until curl READY_URL`: every 30 s, at most 30 tries, then the loop anyway."""
        if c.run != run or not c.up:
            return
        if self._registrar_check_ok(c):
            self._append(c, ["Model ready, starting registration loop"])
            self._schedule(2.0, self._registrar_tick, c, run, 0, False)
            return
        attempt += 1
        ready_url = f"http://{c.env.get('HOST_IP', self.host_ip)}:8000/v1/models"
        if attempt >= READY_ATTEMPTS:
            self._append(c, [
                f"WARN: model not reachable at {ready_url} after {attempt} attempts (~20m); "
                "entering registration loop anyway",
                "Model ready, starting registration loop",
            ])
            self._schedule(0.0, self._registrar_tick, c, run, 0, False)
            return
        self._append(c, [f"Model not ready yet (attempt {attempt}/{READY_ATTEMPTS}), retrying in 30s..."])
        self._schedule(READY_PROBE_S, self._registrar_probe, c, run, attempt)

    def _registrar_check_ok(self, c: Container) -> bool:
        """The registrar's probes through the host's :8000 (nginx -> proxy-glm53 -> an engine);
        the `no-rejoin` fault makes every probe of a registrar started during the simulation fail
        (the one deployed before it keeps the host registered: the fault is the rejoin's)."""
        started_before = c.started_at is not None and c.started_at <= 0
        return self._serving_path_ok() and (started_before or not self.faults.active("no-rejoin"))

    def _registrar_tick(self, c: Container, run: int, failures: int, registered: bool) -> None:
        """One turn of the registration loop (`registered` is the script's REGISTERED)."""
        if c.run != run or not c.up:
            return
        ip = c.env.get("HOST_IP", self.host_ip)
        if self._registrar_check_ok(c):
            lines = [f"Registering endpoint {ip}:8000 with routing port {MODEL_PROXY_PORT}"]
            if not registered:
                lines.append(f"[GLM-5.3-Flash-SGL-TP4] Registered {SERVED_MODEL} (2x TP4/EP4) at {ip}:8000")
            self._append(c, lines)
            self._set_registered(True)
            failures, registered = 0, True
        else:
            failures += 1
            self._append(c, [f"[GLM-5.3-Flash-SGL-TP4] Health check failed ({failures}/{REGISTER_MAX_RETRIES})"])
            if registered and failures >= REGISTER_MAX_RETRIES:
                self._append(c, [
                    f"[GLM-5.3-Flash-SGL-TP4] Retry limit reached, unregistering {ip}:8000",
                    f"Unregistering endpoint {ip}:8000",
                    "[GLM-5.3-Flash-SGL-TP4] Exiting to refresh DNS (container will auto-restart)",
                ])
                self._set_registered(False)
                self._exit(c, 1)
                return
        self._schedule(REGISTER_LOOP_S, self._registrar_tick, c, run, failures, registered)

    def _perception_done(self, c: Container, run: int, ok: bool) -> None:
        if c.run != run:
            return
        for replica in (1, 2):
            self._append(c, [json.dumps({"event": "replica", "replica": replica})])
        self._append(c, [json.dumps({"event": "qualification_finished", "ok": ok})])
        self._oneshot_exit(c, run, 0 if ok else 1)

    def _oneshot_exit(self, c: Container, run: int, code: int) -> None:
        if c.run != run or c.state != "running":
            return
        self._exit(c, code)

    def _service_start_lines(self, c: Container, t: float) -> list[str]:
        ts = self.wall(t).strftime("%Y/%m/%d %H:%M:%S")
        iso = self.wall(t).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        ip = c.env.get("HOST_IP", HOST_IP)
        if c.service == NGINX_SERVICE:
            return [
                "/docker-entrypoint.sh: /docker-entrypoint.d/ is not empty, will attempt to perform configuration",
                "/docker-entrypoint.sh: Configuration complete; ready for start up",
                f"{ts} [notice] 1#1: nginx/1.27.3",
                f"{ts} [notice] 1#1: start worker processes",
            ]
        if c.service == REGISTRAR_SERVICE and self.base:  # the legacy :8001 cleanup comes first
            return [f"Unregistering endpoint {ip}:8001", f"Waiting for model to be ready (probing http://{ip}:8000/v1/models)..."]
        if c.service == REGISTRAR_SERVICE:
            return [f"Waiting for model to be ready (probing http://{ip}:8000/v1/models)..."]
        if c.service == PROXY_SERVICE:
            return [
                json.dumps(
                    {
                        "timestamp": iso,
                        "level": "INFO",
                        "message": "starting inference proxy",
                        "backends": [f"http://{b}:8000" for b in c.proxy_pool],
                    }
                )
            ]
        if c.service == "dcgm-glm53":
            return [f'time="{iso}" level=info msg="Starting webserver"']
        if c.service == "otelcol-contrib":
            return [
                f"{iso}\tinfo\tservice@v0.129.0/service.go:199\tEverything is ready. Begin running and processing data."
            ]
        return []

    def _registrar_registered(self, c: Container, run: int) -> None:
        if c.run != run or not c.up:
            return
        self._append(c, self._registrar_lines(c))

    @staticmethod
    def _registrar_lines(c: Container) -> list[str]:
        ip = c.env.get("HOST_IP", HOST_IP)
        only = c.env.get("LONG_TIER_ONLY", "true")
        return [
            "Model ready, starting registration loop",
            f"Unregistering endpoint {ip}:8000",
            f"Registering endpoint {ip}:8001 with routing port {MODEL_PROXY_PORT}",
            f"[GLM-5.3-Flash-SGL-TP4-LongContext] Registered long-context tier z-ai/glm-5.3-flash-long "
            f"(2x TP4/EP4, long_tier_only={only}) at {ip}:8001 -> :{MODEL_PROXY_PORT}",
        ]

    def _status(self, c: Container) -> str:
        now = self._now
        if c.state == "running":
            s = "Up " + docker_format.human_duration(now - (c.started_at or now))
            if c.has_healthcheck:
                s += " (health: starting)" if now - (c.started_at or now) < REGISTRAR_HEALTH_START_S else " (healthy)"
            return s
        if c.state == "restarting":
            return f"Restarting ({c.exit_code}) {docker_format.human_duration(now - (c.finished_at or now))} ago"
        if c.state == "exited":
            return f"Exited ({c.exit_code}) {docker_format.human_duration(now - (c.finished_at or now))} ago"
        if c.state == "removing":
            return "Removal In Progress"
        if c.state == "dead":
            return "Dead"
        return "Created"

    def _view(self, c: Container) -> ContainerView:
        return ContainerView(
            id=c.id,
            name=c.name,
            service=c.service,
            project=c.project,
            image=c.image,
            state=c.state,
            status=self._status(c),
            created_at=c.created_at,
            started_at=c.started_at,
            finished_at=c.finished_at,
            exit_code=c.exit_code,
            restart_count=c.restart_count,
            tag=c.tag,
            file=c.file,
            config_hash=c.config_hash,
            slot=c.slot,
            ready=c.ready,
            stopping=c.stopping,
            booked_bytes=c.engine.booked_bytes if c.engine else 0,
        )

    def containers(self, project: str | None = None) -> list[ContainerView]:
        with self._lock:
            self.sync()
            return [
                self._view(c)
                for c in sorted(self._containers.values(), key=lambda c: c.name)
                if project is None or c.project == project
            ]

    def container(self, name: str) -> ContainerView | None:
        with self._lock:
            self.sync()
            c = self._containers.get(name)
            return self._view(c) if c else None

    def logs(self, name: str) -> list[str]:
        with self._lock:
            self.sync()
            c = self._containers.get(name)
            return list(c.log) if c else []

    def last_log(self, name: str) -> list[str]:
        """The log of container `name`, or of the last one removed under that name (for tests:
        compose/logs no longer shows a removed container, e.g. the registrar after a drain)."""
        with self._lock:
            self.sync()
            c = self._containers.get(name)
            return list(c.log) if c else list(self._removed_logs.get(name, []))

    def crash(self, name: str, *, hang_cold_start: bool = False) -> None:
        """What a production host may do on its own: engine `name`'s process dies (an NCCL
        error, exit 1) and its restart policy brings the same container back into a cold start,
        which never finishes with `hang_cold_start`. For tests: an engine in a cold start that no
        run started (e.g. r1 while a rollout is about to stop the old r2)."""
        with self._lock:
            self.sync()
            c = self._containers.get(name)
            if c is None or c.engine is None or c.state != "running":
                raise ValueError(f"{name} is not a running engine")
            if hang_cold_start:
                c.engine.fault = "cold-start-hang"
            self._append(c, sglang_log.nccl_error_lines(self.wall()))
            self._exit(c, 1)  # restarting; the restart policy starts it again (a cold start)

    def clear_work_dir(self) -> None:
        """compose-manager came back with an empty work dir (its container was recreated): every
        file must be fetched again by an up or dry run naming it; until then `compose/logs` and
        `compose/down` of that file fail (500 `open .../prod/X.yaml: no such file or directory`),
        while the containers it deployed run on. For tests."""
        with self._lock:
            self._work_dir.clear()

    def booked_bytes(self) -> int:
        with self._lock:
            self.sync()
            return self._booked()

    def ps_lines(self, project: str | None = None, services: list[str] | None = None) -> list[str]:
        with self._lock:
            self.sync()
            out = []
            for c in sorted(self._containers.values(), key=lambda c: c.created_at, reverse=True):
                if c.state not in ("running", "restarting"):
                    continue  # plain `docker ps` (no -a): exited, created, removing, dead not listed
                if project and c.project != project:
                    continue
                if services and c.service not in services:
                    continue
                out.append(docker_format.ps_line(self._ps_fields(c)))
            return out

    def _ps_fields(self, c: Container) -> dict[str, object]:
        ports = ""
        if c.state == "running":
            if c.service == NGINX_SERVICE:  # the ports its file publishes (gpu02's also 8001)
                ports = ", ".join(f"0.0.0.0:{h}->{p}/tcp" for h, p in sorted(c.ports))
            elif c.service == RELAY_SERVICE:
                ports = "0.0.0.0:8008-8009->8008-8009/tcp"
            elif c.engine is not None or c.service == PROXY_SERVICE:
                ports = "8000/tcp"
        command = c.command.split()
        shown = " ".join(command[:3])
        return {
            "Command": '"' + (shown[:20] + "…" if len(shown) > 20 else shown) + '"',
            "CreatedAt": docker_format.created_at(self.wall(c.created_at)),
            "ID": c.id,
            "Image": c.image,
            "Labels": docker_format.labels_string(c.labels),
            "LocalVolumes": "2" if c.engine is not None else "0",
            "Mounts": "kernel_cache,huggingface_cache" if c.engine is not None else "",
            "Names": c.name,
            "Networks": f"{c.project}_default",
            "Ports": ports,
            "RunningFor": docker_format.human_duration(self._now - c.created_at) + " ago",
            "Size": "0B",
            "State": c.state,
            "Status": self._status(c),
        }

    def compose_logs(self, services: list[str], tail: int, project: str = PROJECT) -> str:
        with self._lock:
            self.sync()
            found = [c for c in self._containers.values() if c.service in services and c.project == project]
            found.sort(key=lambda c: services.index(c.service))
            if not found:
                return ""
            width = max(len(c.name) for c in found) + 1
            lines = []
            for c in found:
                for line in c.log[-tail:] if tail > 0 else []:
                    lines.append(f"{c.name:<{width}} | {line}")
            return "\n".join(lines) + ("\n" if lines else "")


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
