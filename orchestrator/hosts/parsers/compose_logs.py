"""`docker compose logs` text -> `LogLine(container, text)`.

Rules, in this order, for each `\\n`-terminated line:
1. A trailing `\\r` (CRLF) is dropped and ANSI escape sequences (colours) are stripped.
2. The `<container>  | ` prefix (padding varies with the longest name) is split off; a line
   without a prefix gets container `""`. A line that is completely empty is dropped (it carries
   nothing; compose prints an empty engine line as `name  | `, which is kept with text `""`).
3. Carriage-return progress bars: a line holding several `\\r`-separated redraws keeps only the
   last non-empty segment (what a terminal would show). The prefix is split off first, so the
   container name survives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
PREFIX_RE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*)\s+\|(?: |$)(?P<text>.*)$", re.DOTALL)


@dataclass(frozen=True)
class LogLine:
    container: str
    text: str


def last_redraw(text: str) -> str:
    """The last non-empty `\\r`-separated segment (the whole text when there is no `\\r`)."""
    if "\r" not in text:
        return text
    segments = [s for s in text.split("\r") if s]
    return segments[-1] if segments else ""


def parse_compose_line(line: str) -> LogLine | None:
    if line.endswith("\r"):
        line = line[:-1]
    line = ANSI_RE.sub("", line)
    if not line:
        return None
    match = PREFIX_RE.match(line)
    if match:
        return LogLine(match.group("name"), last_redraw(match.group("text")))
    return LogLine("", last_redraw(line))


def parse_compose_logs(text: str) -> list[LogLine]:
    return [parsed for parsed in map(parse_compose_line, text.split("\n")) if parsed is not None]
