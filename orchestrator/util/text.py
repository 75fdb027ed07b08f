"""External text (log lines, notes, host answers) shown to a person as text: every control
character (but tab), DEL and bidi override or isolate is written as `\\xNN` / `\\uNNNN`, a line
break as `\\n` (one field stays one line). No markup handling: rich callers escape after this."""

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
    return _HIDDEN.sub(_visible, text)

