"""docker compose dry-run lines (` ✔ DRY-RUN MODE -  Container <name>  <Status>  0.0s`) ->
`DryRunResult`: what an `up` would do, per service (`STATUS_ACTIONS`; Running/Healthy/Waiting/
Exited are states and read as unchanged).

Container name -> service: the name itself (`container_name` is the service key in these repos),
or with `project`, the name less `[<12 hex>_]<project>-` (or `_`) and the `-<N>` replica or
`-run-<12 hex>` one-off suffix: `nginx-golang-mysql-db-1` -> `db`.

Ignored: `Network`/`Volume`/`Image` lines, image pull/build lines, and lines
without `DRY-RUN` (`[+] Running 8/6`). Unknown: any other `DRY-RUN` line, and a container action
WITHOUT the mark (docker/compose#14029: a dry run that acts for real); callers must not trust a
plan with `unknown_lines`. A service seen several times gets the strongest action
(removed > recreated > created > started > unchanged).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

DRY_RUN_MARK = "DRY-RUN"

STATUS_ACTIONS: dict[str, str] = {status: action for action, statuses in {
    "created": ("created", "creating"),
    "recreated": ("recreated", "recreate", "recreating"),
    "started": ("started", "starting"),
    "unchanged": ("running", "healthy", "waiting", "exited"),
    "removed": ("removed", "removing", "stopped", "stopping", "killed", "killing"),
}.items() for status in statuses}

STRENGTH = {"unchanged": 0, "started": 1, "created": 2, "recreated": 3, "removed": 4}

IMAGE_STATUSES = frozenset({"pulled", "pulling", "built", "building", "skipped", "exists", "pull complete"})
RESOURCE_KINDS = frozenset({"Network", "Volume", "Image"})

_DURATION_RE = re.compile(r"^\d+(?:\.\d+)?m?s$")
_DRY_RE = re.compile(r"DRY-RUN MODE\s*-\s*(?P<rest>.*)$")
_BARE_CONTAINER_RE = re.compile(r"^\W*\s*Container\s+\S+\s+(?P<status>[A-Za-z]+)")


@dataclass
class DryRunResult:
    actions: dict[str, str] = field(default_factory=dict)
    unknown_lines: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def container_service(name: str, project: str | None = None) -> str:
    if project:
        pattern = re.compile(
            r"^(?:[0-9a-f]{12}_)?" + re.escape(project) + r"[-_](?P<svc>.+?)(?:[-_]\d+|-run-[0-9a-f]{12})$"
        )
        match = pattern.match(name)
        if match:
            return match.group("svc")
    return name


def parse_dry_run(lines: Iterable[str], project: str | None = None) -> DryRunResult:
    plan = DryRunResult()
    for raw in lines:
        line = raw.rstrip("\r\n")
        plan.lines.append(line)
        match = _DRY_RE.search(line)
        if match is None:
            bare = _BARE_CONTAINER_RE.match(line)
            if DRY_RUN_MARK in line:
                plan.unknown_lines.append(line)
            elif bare and bare.group("status").lower() in STATUS_ACTIONS:
                plan.unknown_lines.append(line)  # maybe a real action (compose#14029)
            continue
        rest = match.group("rest").strip()
        if not rest or rest.startswith("==>") or rest.startswith("build service"):
            continue
        tokens = rest.split()
        if tokens and _DURATION_RE.match(tokens[-1]):
            tokens.pop()
        if not tokens:
            plan.unknown_lines.append(line)
            continue
        kind = tokens[0]
        if kind == "Container" and len(tokens) >= 3:
            name, status = tokens[1], " ".join(tokens[2:])
            action = STATUS_ACTIONS.get(status.lower())
            if action is None:
                plan.unknown_lines.append(line)
                continue
            service = container_service(name, project)
            plan.actions[service] = max(plan.actions.get(service, action), action, key=STRENGTH.__getitem__)
        elif (kind in RESOURCE_KINDS and len(tokens) >= 3) or (len(tokens) >= 2 and " ".join(tokens[1:]).lower() in IMAGE_STATUSES):
            continue
        else:
            plan.unknown_lines.append(line)
    return plan
