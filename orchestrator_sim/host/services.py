"""The simulated host's other containers: the one-shots (model downloader, perception check,
hf-cleanup), a base host's registrar step by step (readiness probe, registration loop, giving up),
gpu02's registrar, and what the long-running services print when they start."""

from __future__ import annotations

import json
import re

from orchestrator_sim.compose_manager.repo import DOWNLOADER_SERVICE, NGINX_SERVICE, PROXY_SERVICE, REGISTRAR_SERVICE
from orchestrator_sim.host.containers import HOST_IP, MODEL_PROXY_PORT, SERVED_MODEL, Container
from orchestrator_sim.host.state import (
    BASE_DOWNLOAD_STEPS_S,
    DOWNLOADER_RUN_S,
    PERCEPTION_RUN_S,
    READY_ATTEMPTS,
    READY_PROBE_S,
    REGISTER_LOOP_S,
    REGISTER_MAX_RETRIES,
    HostState,
)
from orchestrator_sim.record.timeline import SLOTS


class HostServices(HostState):
    """The non-engine containers' processes (HostCore's `_start` begins them)."""

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
