"""A step's symbolic compose request made concrete: `new` is the runbook's file at the run's tag,
`previous:<service>` the tag and file that last deployed that service (read from the action log at
preflight, or given to `rollback`), `services: selected` what the previous dry run selected.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.language.runbook import SELECTED, ComposeSpec, Runbook


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


def resolve_services(spec: ComposeSpec, selected: list[str] | None) -> tuple[str, ...]:
    """The concrete services of a `services:` reference."""
    if spec.services == SELECTED:
        if not selected:
            raise UnresolvedReference("services: selected, but the previous dry run selected nothing")
        return tuple(selected)
    return tuple(spec.services)


def describe_file(spec_file: str, rb: Runbook, tag: str | None,
                  previous: Mapping[str, Mapping[str, str]] | None = None) -> tuple[str, str]:
    """(tag, file) for display: a previous deploy that is not known yet (offline plans) as a placeholder."""
    if spec_file == "new":
        return tag or "<tag>", rb.file
    try:
        return resolve_file(spec_file, rb, tag, previous or {})
    except UnresolvedReference:
        service = spec_file.split(":", 1)[1]
    return (f"<previous tag of {service}, from the action log>", f"<previous file of {service}, from the action log>")
