"""`docker compose logs` text -> `LogLine(container, text)`, per line: a trailing `\\r` and ANSI
escapes are stripped; the `<container>  | ` prefix is split off (none: container `""`); an empty
line is dropped (an empty engine line `name  | ` is kept, text `""`); of several `\\r`-separated
progress redraws only the last non-empty one is kept, as a terminal shows it.
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
