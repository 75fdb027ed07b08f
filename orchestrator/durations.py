"""Durations as docker compose and our runbooks write them: `5m`, `30s`, `1h30m`, `500ms`, `0s`."""

from __future__ import annotations

from orchestrator.compose_file import parse_duration as _compose_duration


def parse_duration(text: str | int | float) -> float:
    """Seconds in `text`: compose's Go-style durations, or a bare number of seconds (runbooks)."""
    if isinstance(text, bool):
        raise ValueError(f"duration {text!r} is not understood: use e.g. 50m, 30s, 1h30m")
    if isinstance(text, (int, float)):
        if text < 0:
            raise ValueError(f"duration {text!r} is negative")
        return float(text)
    try:
        return float(text.strip()) if text.strip().replace(".", "", 1).isdigit() else _compose_duration(text)
    except Exception as exc:  # compose_file raises its own error type
        raise ValueError(f"duration {text!r} is not understood: use e.g. 50m, 30s, 1h30m") from exc


def format_duration(seconds: float) -> str:
    """`3000` -> `50m`, `5400` -> `1h30m`, `0` -> `0s`, `1.5` -> `1.5s`."""
    if seconds < 60 and seconds != int(seconds):
        return f"{seconds:g}s"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    out = (f"{h}h" if h else "") + (f"{m}m" if m else "") + (f"{sec}s" if sec else "")
    return out or "0s"
