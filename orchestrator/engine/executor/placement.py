"""Observing what the host runs, for placement (`engine.rules.host_state`): read-only.

An engine is placed from docker/ps (its `config_files` label) and the action log (the tag its
file was last applied at) alone: no dry run names an engine, since with docker/compose#14029 a
dry run that plans a recreate performs it. A dry run is sent only when everything else matches a
`done` state (so nothing is an orphan), naming its shared services; docker/ps is compared around
it, and an action-log entry that appeared meanwhile names who else acted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.engine.rules.foreign_change import describe_action
from orchestrator.engine.rules.host_state import matches, new_file_services, observed_services
from orchestrator.hosts.clients.compose_manager import ComposeRequest
from orchestrator.hosts.envmap import EnvMap
from orchestrator.hosts.parsers.dry_run import parse_dry_run
from orchestrator.hosts.ps_compare import compare_ps, describe_changes, on_definition
from orchestrator.language.runbook import Runbook


class PlacementError(Exception):
    def __init__(self, text: str, *, changed: bool = False) -> None:
        super().__init__(text)
        self.changed = changed


async def observe_host(compose: Any, env: EnvMap, rb: Runbook, tag: str, project: str | None,
                       on_dry_run: Callable[[ComposeRequest, Any], None] | None = None) -> dict[str, str]:
    actions = await compose.action_log()
    before = await compose.ps(project)  # read right before the dry run, if one is sent
    running = {(c.service or c.name): c for c in before if c.state in ("running", "restarting")}
    observed: dict[str, str] = {}
    judged = set(new_file_services(rb))
    for svc in observed_services(rb):
        c = running.get(svc)
        if c is None:
            observed[svc] = "absent"
            continue
        if svc not in judged:  # declared only `running` or `absent`: which file does not matter
            observed[svc] = "running"
            continue
        on = on_definition(c, svc, tag, rb.file, actions)
        observed[svc] = "other" if on is None else ("new" if on else "previous")
    shared = _shared_to_dry_run(rb, observed)
    if not shared:
        return observed
    req = ComposeRequest(tag=tag, file=rb.file, services=tuple(shared), project=project, dry_run=True)
    outcome = await compose.up(req, env)
    if on_dry_run is not None:
        on_dry_run(req, outcome)
    after = await compose.ps(project)
    changes = compare_ps(before, after, rb.oneshot_services())
    if changes:
        later = (await compose.action_log())[len(actions):]
        if later:
            raise PlacementError(f"the host changed while it was being read: compose-manager's action log records "
                                 f"{describe_action(later[0])}, which no dry run makes (another orchestrator or a person is "
                                 f"acting on it; changed: {describe_changes(changes)})", changed=True)
        raise PlacementError(f"the placement dry run of {', '.join(shared)} changed real containers: {describe_changes(changes)} "
                             f"(docker/compose#14029): inspect the host", changed=True)
    if outcome.status != "success":
        raise PlacementError(f"the placement dry run of {rb.file}@{tag} did not succeed: " + " | ".join(outcome.lines[-3:]))
    planned = dict(parse_dry_run(outcome.lines, project=project).actions)
    for svc in shared:
        act = planned.get(svc, "unchanged")
        observed[svc] = "new" if act == "unchanged" else ("previous" if act == "recreated" else "other")
    return observed


def _shared_to_dry_run(rb: Runbook, observed: dict[str, str]) -> list[str]:
    """The running shared services a `done` state declares on the new file, when that state is
    otherwise matched: only then can a dry run of them change the placement, and orphan nothing."""
    out: list[str] = []
    for state in rb.host_states:
        if state.action != "done":
            continue
        shared = [s for s, want in state.services.items()
                  if want in ("new", "previous") and not rb.replica_of(s) and observed.get(s, "absent") != "absent"]
        rest_ok = all(matches(want, observed.get(s, "absent")) for s, want in state.services.items() if s not in shared)
        if rest_ok:
            out += [s for s in shared if s not in out]
    return out
