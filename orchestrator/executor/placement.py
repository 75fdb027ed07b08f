"""Observing what the host runs, for placement (`orchestrator.host_state`): read-only.

docker/ps says what runs; one dry run of the new file at the tag, scoped to the services the
host states expect on it, says which of them already run the new definition (`unchanged`) and
which would be recreated. docker/ps is compared around that dry run (docker/compose#14029).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.clients.compose_manager import ComposeRequest
from orchestrator.envmap import EnvMap
from orchestrator.host_state import new_file_services, observed_services
from orchestrator.parsers.docker_ps import changed_containers, snapshot
from orchestrator.parsers.dry_run import parse_dry_run
from orchestrator.runbook import Runbook


class PlacementError(Exception):
    def __init__(self, text: str, *, changed: bool = False) -> None:
        super().__init__(text)
        self.changed = changed


async def observe_host(compose: Any, env: EnvMap, rb: Runbook, tag: str, project: str | None,
                       on_dry_run: Callable[[ComposeRequest, Any], None] | None = None) -> dict[str, str]:
    before = await compose.ps(project)
    running = {(c.service or c.name) for c in before if c.state in ("running", "restarting")}
    wanted = [s for s in new_file_services(rb) if s in running]
    actions: dict[str, str] = {}
    if wanted:
        req = ComposeRequest(tag=tag, file=rb.file, services=tuple(wanted), project=project, dry_run=True)
        outcome = await compose.up(req, env)
        if on_dry_run is not None:
            on_dry_run(req, outcome)
        after = await compose.ps(project)
        if changed_containers(snapshot(before), snapshot(after)):
            raise PlacementError("the placement dry run changed real containers (docker/compose#14029): inspect the host", changed=True)
        if outcome.status != "success":
            raise PlacementError(f"the placement dry run of {rb.file}@{tag} did not succeed: " + " | ".join(outcome.lines[-3:]))
        actions = dict(parse_dry_run(outcome.lines, project=project).actions)
    observed: dict[str, str] = {}
    for svc in observed_services(rb):
        if svc not in running:
            observed[svc] = "absent"
        elif svc not in wanted:
            observed[svc] = "running"
        else:
            act = actions.get(svc, "unchanged")
            observed[svc] = "new" if act == "unchanged" else ("previous" if act == "recreated" else "other")
    return observed
