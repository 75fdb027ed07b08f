"""The core of the simulated host: `HostCore`, its parts assembled (state and time in
state.py, the engines' cold start in engines.py, the other containers in
services.py, docker's view in docker.py) with the containers' lifecycle (start, exit,
restart policy, stop, removal) and what a production host may do on its own (an engine crash)."""

from __future__ import annotations

from orchestrator_sim.compose_manager.repo import REGISTRAR_SERVICE
from orchestrator_sim.host import sglang_log
from orchestrator_sim.host.containers import Container
from orchestrator_sim.host.docker import HostDockerView
from orchestrator_sim.host.engine_cache import PrefixCache
from orchestrator_sim.host.engines import HostEngines
from orchestrator_sim.host.services import HostServices
from orchestrator_sim.host.state import (  # noqa: F401 - the host's constants, imported from here (sim_host.py, compose_manager/ops.py)
    BASE_DOWNLOAD_STEPS_S,
    DOWNLOADER_RUN_S,
    LOG_CAP,
    NOISE_INTERVAL_S,
    ORPHAN_STOP_TIMEOUT_S,
    PERCEPTION_RUN_S,
    REGISTER_LOOP_S,
    REGISTRAR_HEALTH_START_S,
    UNREGISTER_S,
    HostState,
    stale_config_variant,
)


class HostCore(HostEngines, HostServices, HostDockerView):
    """The host's state, its parts and the containers' lifecycle. SimHost (sim_host.py) builds it."""

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
