"""Durations as docker compose and our runbooks write them: `5m`, `30s`, `1h30m`, `500ms`, `0s`.
Every duration is finite, not negative and at most 7 days: a `NaN` soak would crash a run part-way
with its lease held, and a duration of years is a typo."""

from __future__ import annotations

import math
import re
from decimal import Decimal

#: The longest duration accepted anywhere (runbook timeouts, soaks, `--soak`): 7 days.
MAX_DURATION_S = 7 * 24 * 3600.0
#: A bare number of seconds: ASCII digits only (`str.isdigit` also accepts other scripts' digits).
_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")
_HINT = "use e.g. 50m, 30s, 1h30m"
#: Go's duration units, as compose reads `stop_grace_period` (compose_file.py uses this parser).
_DURATION_UNITS = {
    "ns": Decimal("1e-9"),
    "us": Decimal("1e-6"),
    "µs": Decimal("1e-6"),  # U+00B5 micro sign
    "μs": Decimal("1e-6"),  # U+03BC Greek mu
    "ms": Decimal("1e-3"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION = re.compile(rf"(?:{_DURATION_PART.pattern})+")


def parse_go_duration(text: str) -> float:
    """Seconds in a Go duration (compose's `stop_grace_period`): fractional parts allowed, `0`
    alone allowed, no sign and no bare number (compose refuses `30`)."""
    stripped = text.strip()
    if stripped == "0":
        return 0.0
    if not _DURATION.fullmatch(stripped):
        raise ValueError(
            f"duration {text!r} is not understood: use e.g. 30s, 5m, 1h30m or 500ms"
        )
    parts = _DURATION_PART.findall(stripped)
    total = sum((Decimal(number) * _DURATION_UNITS[unit] for number, unit in parts), Decimal(0))
    return float(total)


def parse_duration(text: str | int | float) -> float:
    """Seconds in `text` (a Go duration or a bare number); one-line ValueError if not finite,
    negative or longer than `MAX_DURATION_S`."""
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
            value = float(stripped) if _SECONDS.fullmatch(stripped) else parse_go_duration(stripped)
        except Exception as exc:  # parse_go_duration's own message names the Go form
            raise ValueError(f"duration {text[:40]!r} is not understood: {_HINT}") from exc
    if not math.isfinite(value):
        raise ValueError(f"duration {text!r} is not a finite number of seconds")
    if value < 0:
        raise ValueError(f"duration {text!r} is negative")
    if value > MAX_DURATION_S:
        raise ValueError(f"duration {str(text)[:40]!r} is longer than {format_duration(MAX_DURATION_S)}")
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
