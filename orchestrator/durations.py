"""Durations as docker compose and our runbooks write them: `5m`, `30s`, `1h30m`, `500ms`, `0s`.

Every duration is finite, not negative and at most `MAX_DURATION_S` (7 days). A soak of `NaN`
or `Infinity` once got past the old parser (it only refused negatives, and `NaN < 0` is false)
and crashed a run part-way, its host lease still held; a duration of years is a typo, not a plan.
"""

from __future__ import annotations

import math
import re

from orchestrator.compose_file import parse_duration as _compose_duration

#: The longest duration accepted anywhere (runbook timeouts, soaks, `--soak`): 7 days.
MAX_DURATION_S = 7 * 24 * 3600.0
#: A bare number of seconds: ASCII digits only (`str.isdigit` also accepts other scripts' digits).
_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")
_HINT = "use e.g. 50m, 30s, 1h30m"


def parse_duration(text: str | int | float, *, max_s: float = MAX_DURATION_S) -> float:
    """Seconds in `text`: compose's Go-style durations, or a bare number of seconds (runbooks).

    Raises ValueError (one line) for anything not finite, negative or longer than `max_s`.
    """
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise ValueError(f"duration {text!r} is not understood: {_HINT}")
    if isinstance(text, (int, float)):
        try:
            value = float(text)
        except OverflowError:
            raise ValueError("duration is too long") from None
    else:
        stripped = text.strip()
        try:
            value = float(stripped) if _SECONDS.fullmatch(stripped) else _compose_duration(stripped)
        except Exception as exc:  # compose_file raises its own error type
            raise ValueError(f"duration {text[:40]!r} is not understood: {_HINT}") from exc
    if not math.isfinite(value):
        raise ValueError(f"duration {text!r} is not a finite number of seconds")
    if value < 0:
        raise ValueError(f"duration {text!r} is negative")
    if value > max_s:
        raise ValueError(f"duration {str(text)[:40]!r} is longer than {format_duration(max_s)}")
    return value


def format_duration(seconds: float) -> str:
    """`3000` -> `50m`, `5400` -> `1h30m`, `0` -> `0s`, `1.5` -> `1.5s`."""
    if seconds < 60 and seconds != int(seconds):
        return f"{seconds:g}s"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    out = (f"{h}h" if h else "") + (f"{m}m" if m else "") + (f"{sec}s" if sec else "")
    return out or "0s"
