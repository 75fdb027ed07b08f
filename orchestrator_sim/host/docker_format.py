"""How docker prints containers and durations (`docker ps --format json`, `Up 2 hours`)."""

from __future__ import annotations

import json
from datetime import datetime


def human_duration(seconds: float) -> str:
    """docker's go-units HumanDuration."""
    s = int(seconds)
    if s < 1:
        return "Less than a second"
    if s == 1:
        return "1 second"
    if s < 60:
        return f"{s} seconds"
    minutes = int(seconds / 60)
    if minutes == 1:
        return "About a minute"
    if minutes < 60:
        return f"{minutes} minutes"
    hours = int(round(seconds / 3600))
    if hours == 1:
        return "About an hour"
    if hours < 48:
        return f"{hours} hours"
    if hours < 24 * 7 * 2:
        return f"{hours // 24} days"
    if hours < 24 * 30 * 2:
        return f"{hours // 24 // 7} weeks"
    if hours < 24 * 365 * 2:
        return f"{hours // 24 // 30} months"
    return f"{int(seconds / 3600) // 24 // 365} years"


def created_at(ts: datetime) -> str:
    """`CreatedAt` as docker prints it for a UTC daemon: `2026-11-30 07:52:02 +0000 UTC`."""
    return ts.strftime("%Y-%m-%d %H:%M:%S +0000 UTC")


def labels_string(labels: dict[str, str]) -> str:
    """docker joins labels with commas and does not escape them (values may contain commas)."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def ps_line(fields: dict[str, object]) -> str:
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":"))
