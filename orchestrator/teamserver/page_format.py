"""Formatting helpers of the server's HTML (orchestrator/teamserver/pages.py, run_view.py): escaping,
times and durations as a person reads them, a lease owner as `pid N on machine`, a runbook text
with the run's `{host}`, `{run_id}`, `{tag}` filled in, and the seconds spent in each state from
a run's journaled transitions.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime
from typing import Any


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _since(iso: str | None) -> str:
    if not iso:
        return ""
    try:
        at = datetime.fromisoformat(iso)
    except ValueError:
        return iso
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _runner(owner: str | None) -> str:
    """A lease owner as a person reads it (`pid 4242 on vm`), never the raw `host:pid:boot:start`."""
    if not owner:
        return ""
    from orchestrator.journal.owner import describe_owner

    try:
        return describe_owner(owner)
    except Exception:  # noqa: BLE001 - an owner text of another version: shown as it is
        return owner


def _fill(text: str, d: dict[str, Any]) -> str:
    """A runbook text with `{host}`, `{run_id}`, `{tag}` filled in (others left as written)."""
    values = {"host": d.get("host") or "", "run_id": d.get("run_id") or "", "tag": d.get("tag") or ""}

    class Keep(dict):  # type: ignore[type-arg]
        def __missing__(self, key: str) -> str:
            return "{" + key + "}"

    try:
        return text.format_map(Keep(values))
    except (ValueError, IndexError, AttributeError):
        return text


def _at(iso: str | None) -> datetime | None:
    if not iso:
        return None
    try:
        return datetime.fromisoformat(iso)
    except ValueError:
        return None


def _dur(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = int(max(0, seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def _durations(d: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    prev = _at(d.get("created_at"))
    for t in d.get("transitions") or []:
        at = _at(t["at"])
        if prev is not None and at is not None:
            out[t["from"]] = out.get(t["from"], 0.0) + max(0.0, (at - prev).total_seconds())
        prev = at
    return out
