"""`docker ps --format json` output (compose-manager's `/docker/ps`) -> `Container`s.

One JSON object per line (a whole array on one line is accepted too). `Labels` is one `k=v,...`
string whose values may hold commas (`depends_on=a:service_started:false,b:...`): a segment
without `=` continues the previous value. `name` is the first of `Names`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.hosts.parsers import ParseError

SERVICE_LABEL = "com.docker.compose.service"
PROJECT_LABEL = "com.docker.compose.project"


@dataclass(frozen=True)
class Container:
    id: str
    name: str
    image: str
    state: str
    status: str
    created_at: str
    labels: dict[str, str] = field(default_factory=dict, hash=False)
    service: str | None = None
    project: str | None = None
    health: str = ""
    raw: dict[str, Any] = field(default_factory=dict, hash=False, compare=False, repr=False)

    @property
    def restarting(self) -> bool:
        return self.state == "restarting" or self.status.startswith("Restarting")

    @property
    def is_running(self) -> bool:
        return self.state == "running" and not self.restarting


def parse_labels(labels: str | Mapping[str, Any] | None) -> dict[str, str]:
    if labels is None:
        return {}
    if isinstance(labels, Mapping):
        return {str(k): "" if v is None else str(v) for k, v in labels.items()}
    out: dict[str, str] = {}
    last: str | None = None
    for segment in labels.split(","):
        if "=" in segment:
            key, value = segment.split("=", 1)
            out[key] = value
            last = key
        elif last is not None:
            out[last] += "," + segment
        elif segment.strip():
            out[segment] = ""
    return out


def _str(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    return "" if value is None else str(value)


def container_from_json(obj: Mapping[str, Any], line_no: int) -> Container:
    if not isinstance(obj, Mapping):
        raise ParseError(f"line {line_no}: not a JSON object")
    cid = _str(obj, "ID")
    if not cid:
        raise ParseError(f"line {line_no}: container without ID")
    names_field = obj.get("Names", obj.get("Name", ""))
    if isinstance(names_field, list):
        names = tuple(str(n).lstrip("/") for n in names_field if n)
    else:
        names = tuple(n.strip().lstrip("/") for n in str(names_field or "").split(",") if n.strip())
    labels = parse_labels(obj.get("Labels"))
    return Container(
        id=cid, name=names[0] if names else "", image=_str(obj, "Image"), state=_str(obj, "State").lower(),
        status=_str(obj, "Status"), created_at=_str(obj, "CreatedAt"), labels=labels,
        service=labels.get(SERVICE_LABEL) or (_str(obj, "Service") or None),
        project=labels.get(PROJECT_LABEL) or (_str(obj, "Project") or None),
        health=_str(obj, "Health"), raw=dict(obj),
    )


def parse_docker_ps(output: str) -> list[Container]:
    """Blank lines are skipped, a bad line raises ParseError. Every gate polls docker/ps and most
    lines repeat between polls: a parsed line is cached by its exact text (a `Container` is frozen)."""
    containers: list[Container] = []
    for line_no, line in enumerate(output.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        parsed = _LINE_CACHE.get(line)
        if parsed is None:
            try:
                obj = json.loads(line)
            except ValueError:
                raise ParseError(f"line {line_no}: not JSON") from None
            items = obj if isinstance(obj, list) else [obj]
            parsed = tuple(container_from_json(item, line_no) for item in items)
            if len(_LINE_CACHE) >= _LINE_CACHE_SIZE:
                _LINE_CACHE.pop(next(iter(_LINE_CACHE)))  # the oldest entry
            _LINE_CACHE[line] = parsed
        containers.extend(parsed)
    return containers


#: parsed docker/ps lines by their text, oldest first (bounded: a host lists tens of containers)
_LINE_CACHE: dict[str, tuple[Container, ...]] = {}
_LINE_CACHE_SIZE = 512


def by_service(containers: Iterable[Container]) -> dict[str, Container]:
    """Containers by their compose service (else name)."""
    return {(c.service or c.name): c for c in containers}


def snapshot(containers: Iterable[Container]) -> dict[str, tuple[str, str, str]]:
    """What docker/ps said, to compare later: name -> (id, created_at, state)."""
    return {c.name: (c.id, c.created_at, c.state) for c in containers}


def changed_containers(before: Mapping[str, Sequence[str]], after: Mapping[str, Sequence[str]]) -> list[str]:
    """Names created, removed or recreated (another ID or creation time) between two snapshots:
    what a dry run must never do (docker/compose#14029)."""
    return sorted(n for n in set(before) | set(after) if tuple(before.get(n, (None,))[:2]) != tuple(after.get(n, (None,))[:2]))
