"""Turning a runbook step's symbolic compose request into a concrete one.

`new` is the runbook's file at the run's tag; `previous:<service>` is the tag and file that last
deployed that service, established during preflight from the action log (or given to `rollback`);
`services: selected` is what the previous dry run found on an older definition.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from orchestrator.runbook import SELECTED, ComposeSpec, Runbook

if TYPE_CHECKING:  # the offline plan imports this module without the HTTP clients
    from orchestrator.clients.compose_manager import ComposeRequest


class UnresolvedReference(Exception):
    pass


def resolve_file(spec_file: str, rb: Runbook, tag: str | None, previous: Mapping[str, Mapping[str, str]]) -> tuple[str, str]:
    """(tag, file) for a `file:` reference."""
    if spec_file == "new":
        if not tag:
            raise UnresolvedReference("this run has no target tag")
        return tag, rb.file
    service = spec_file.split(":", 1)[1]
    prev = previous.get(service)
    if not prev or not prev.get("tag") or not prev.get("file"):
        raise UnresolvedReference(f"the previous deploy of {service} is not known (read from the action log at preflight)")
    return prev["tag"], prev["file"]


def resolve_request(
    spec: ComposeSpec,
    rb: Runbook,
    *,
    tag: str | None,
    previous: Mapping[str, Mapping[str, str]],
    selected: list[str] | None,
    project: str | None,
    dry_run: bool = False,
) -> ComposeRequest:
    from orchestrator.clients.compose_manager import ComposeRequest

    req_tag, req_file = resolve_file(spec.file, rb, tag, previous)
    if spec.services == SELECTED:
        if not selected:
            raise UnresolvedReference("services: selected, but the previous dry run selected nothing")
        services = tuple(selected)
    else:
        services = tuple(spec.services)
    return ComposeRequest(
        tag=req_tag, file=req_file, services=services, project=project,
        force_recreate=False, dry_run=dry_run,
    )


def describe_file(spec_file: str, rb: Runbook, tag: str | None) -> tuple[str, str]:
    """(tag, file) for display when nothing is resolved yet (offline plans)."""
    if spec_file == "new":
        return tag or "<tag>", rb.file
    service = spec_file.split(":", 1)[1]
    return (f"<previous tag of {service}, from the action log>", f"<previous file of {service}, from the action log>")
