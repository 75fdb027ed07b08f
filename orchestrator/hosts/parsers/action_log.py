"""compose-manager's action log (the `actions` of `/v1/attestation/report`) -> `Action`s, in log
order: chronological (append-only), which `last_deploy` relies on rather than on timestamps.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.hosts.parsers import ParseError


@dataclass(frozen=True)
class Action:
    timestamp: str | None
    action: str
    tag: str | None
    commit: str | None
    file: str | None
    file_sha256: str | None
    services: tuple[str, ...] = ()  # empty: every service


def _opt_str(entry: Mapping[str, Any], key: str) -> str | None:
    value = entry.get(key)
    return None if value is None else str(value)


def action_from_json(entry: Any, index: int) -> Action:
    if isinstance(entry, str):
        try:
            entry = json.loads(entry)
        except ValueError:
            raise ParseError(f"action {index} is neither an object nor JSON text") from None
    if not isinstance(entry, Mapping):
        raise ParseError(f"action {index} is a {type(entry).__name__}, expected an object")
    action = entry.get("action")
    if not isinstance(action, str) or not action:
        raise ParseError(f"action {index} has no 'action' name")
    services = entry.get("services") or ()
    if isinstance(services, str):
        services = [services]
    if not isinstance(services, (list, tuple)) or not all(isinstance(s, str) for s in services):
        raise ParseError(f"action {index}: 'services' is not a list of strings")
    return Action(timestamp=_opt_str(entry, "timestamp"), action=action, tag=_opt_str(entry, "tag"),
                  commit=_opt_str(entry, "commit"), file=_opt_str(entry, "file"),
                  file_sha256=_opt_str(entry, "file_sha256"), services=tuple(services))


def parse_action_log(report: Mapping[str, Any]) -> list[Action]:
    if not isinstance(report, Mapping):
        raise ParseError(f"report is a {type(report).__name__}, expected an object")
    actions = report.get("actions")
    if actions is None:
        return []
    if not isinstance(actions, list):
        raise ParseError("'actions' is not a list")
    return [action_from_json(entry, i) for i, entry in enumerate(actions)]


def last_deploy(actions: Sequence[Action] | Iterable[Action], service: str) -> Action | None:
    """The last `compose_up` whose services include `service` or that had no services list."""
    found: Action | None = None
    for action in actions:
        if action.action == "compose_up" and (not action.services or service in action.services):
            found = action
    return found
