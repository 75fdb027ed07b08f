"""compose-manager's planning on the simulated host: which containers an up creates, recreates,
starts or leaves running, and the exact `--remove-orphans` rule (which containers of the project
it removes); a dry run's lines and its `plan` event."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator_sim.compose_manager.records import ComposeRequest
from orchestrator_sim.compose_manager.repo import NGINX_SERVICE, TARGET_FILE, ComposeFile
from orchestrator_sim.host.containers import Container
from orchestrator_sim.host.core import HostCore


@dataclass
class PlanItem:
    service: str
    container: str
    action: str  # Created | Recreated | Started | Running | Removed
    extra: bool = False  # added by a fault




class ComposePlanning(HostCore):
    """Planning an up (mixed into SimHost through ComposeOperations)."""

    def _plan(self, cf: ComposeFile, req: ComposeRequest) -> tuple[list[PlanItem], list[Container], str | None]:
        names = req.services or cf.default_services()
        for n in names:
            if n not in cf.services:
                return [], [], f"no such service: {n}"
        items: list[PlanItem] = []
        forced = set(names) if req.force_recreate else set()  # --force-recreate: the named services, not their dependencies
        for name in cf.closure(names):
            sd = cf.services[name]
            c = self._containers.get(sd.container_name)
            if c is not None and c.project != req.project:
                return (
                    [],
                    [],
                    (
                        f'Error response from daemon: Conflict. The container name "/{c.name}" is '
                        f'already in use by container "{c.id}". You have to remove (or rename) that '
                        f"container to be able to reuse that name."
                    ),
                )
            if c is not None and c.state in ("removing", "dead"):
                return [], [], f"Error response from daemon: removal of container {c.name} is already in progress"
            if c is None:
                action = "Created"
            elif name in forced or c.config_hash != sd.config_hash or (
                not self.inline_configs_ignored and c.content_hash != sd.content_hash
            ):
                action = "Recreated"
            elif c.state in ("running", "restarting"):
                action = "Running"
            else:
                action = "Started"
            items.append(PlanItem(name, sd.container_name, action))
        orphans = sorted(
            (c for c in self._containers.values() if c.project == req.project and c.service not in cf.services),
            key=lambda c: c.name,
        )
        if cf.path == TARGET_FILE:
            planned = {i.service for i in items}
            nginx = self._containers.get(NGINX_SERVICE)
            if self.faults.active("dry-run-extra-recreate") and NGINX_SERVICE not in planned and nginx:
                items.append(PlanItem(NGINX_SERVICE, nginx.name, "Recreated", extra=True))
            r1 = self._containers.get("model-sg-glm53-w4afp8-tp4-r1")
            if (
                self.faults.active("dry-run-extra-remove")
                and "model-sg-glm53-w4afp8-tp4-r1" not in planned
                and r1 is not None
                and r1 not in orphans
            ):
                orphans.append(r1)
        return items, orphans, None

    def _dry_run_lines(self, items: list[PlanItem], orphans: list[Container], project: str) -> list[str]:
        """docker compose's non-TTY dry-run output (what 8e07c35 streams): one line per step."""
        out: list[str] = []
        if not any(c.project == project for c in self._containers.values()):
            out += [f"Network {project}_default  Creating", f"Network {project}_default  Created"]
        for c in orphans:
            out += [f"Container {c.name}  {s}" for s in ("Stopping", "Stopped", "Removing", "Removed")]
        for i in items:
            if i.action == "Created":
                out += [f"Container {i.container}  Creating", f"Container {i.container}  Created"]
            elif i.action == "Recreated":
                out += [f"Container {i.container}  Recreate", f"Container {i.container}  Recreated"]
        starting = [i for i in items if i.action != "Running"]
        out += [f"Container {i.container}  Starting" for i in starting]
        out += [f"Container {i.container}  Running" for i in items if i.action == "Running"]
        out += [f"Container {i.container}  Started" for i in starting]
        return [f" DRY-RUN MODE -  {line}" for line in out]

    @staticmethod
    def _plan_event(items: list[PlanItem], orphans: list[Container]) -> dict[str, Any]:
        """The `{"event":"plan",...}` line 8e07c35 sends before a dry run's `done`."""
        return {
            "event": "plan",
            "exit_code": 0,
            "plan": {
                "create": [f"Container {i.container}" for i in items if i.action == "Created"],
                "recreate": [f"Container {i.container}" for i in items if i.action == "Recreated"],
                "remove": [f"Container {c.name}" for c in orphans],
                "unchanged": [f"Container {i.container}" for i in items if i.action in ("Running", "Started")],
            },
            "success": True,
        }
