"""External text shown to a person as text: log lines, notes, host answers, runbook titles.

`shown(text)` makes every character that could change how a terminal or a page shows the text
visible instead: C0 and C1 control characters (but tab), DEL, and the Unicode bidi overrides and
isolates (U+202A-U+202E, U+2066-U+2069, U+200E/U+200F, U+061C) are written as `\\xNN` / `\\uNNNN`.
A line break inside one shown field becomes `\\n`: one field stays one line. Pure; no markup
handling (callers that render through rich escape its markup after this)."""

from __future__ import annotations

import re

_HIDDEN = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _visible(m: re.Match[str]) -> str:
    ch = m.group()
    if ch == "\n":
        return "\\n"
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text: str) -> str:
    """`text` with every control, bidi override and isolate made visible (module docstring)."""
    return _HIDDEN.sub(_visible, text)


__all__ = ["shown"]
