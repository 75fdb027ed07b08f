"""docker compose variable interpolation, written for the simulator (it must not share code with
the orchestrator's own parsers, so that each checks the other).

Supported: `$$` (a literal `$`), `$VAR`, `${VAR}`, `${VAR:-default}`, `${VAR-default}`,
`${VAR:?message}`, `${VAR?message}`, `${VAR:+alt}`, `${VAR+alt}`; defaults may nest.
A variable that is unset and has no default becomes "" and is reported back as a warning, as
docker compose does (`The "X" variable is not set. Defaulting to a blank string.`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class InterpolationError(ValueError):
    """A `${VAR:?message}` whose variable is missing: docker compose refuses the whole file."""

    def __init__(self, name: str, message: str) -> None:
        self.name = name
        self.message = message
        super().__init__(f"required variable {name} is missing a value: {message or name}")


@dataclass
class Interpolator:
    env: Mapping[str, str]
    unset: set[str] = field(default_factory=set)

    def text(self, s: str) -> str:
        out, _ = self._scan(s, 0, stop_at_brace=False)
        return out

    def value(self, value: Any) -> Any:
        """Interpolate every string inside a YAML value (keys are left as they are)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        return value

    # -- scanner -------------------------------------------------------------------------
    def _scan(self, s: str, i: int, *, stop_at_brace: bool) -> tuple[str, int]:
        out: list[str] = []
        n = len(s)
        while i < n:
            c = s[i]
            if stop_at_brace and c == "}":
                return "".join(out), i
            if c != "$":
                out.append(c)
                i += 1
                continue
            nxt = s[i + 1] if i + 1 < n else ""
            if nxt == "$":
                out.append("$")
                i += 2
            elif nxt == "{":
                value, i = self._braced(s, i + 2)
                out.append(value)
            else:
                m = _NAME.match(s, i + 1)
                if m is None:
                    out.append("$")
                    i += 1
                else:
                    out.append(self._lookup(m.group(0)))
                    i = m.end()
        if stop_at_brace:
            raise ValueError(f"unterminated ${{ in {s!r}")
        return "".join(out), i

    def _braced(self, s: str, i: int) -> tuple[str, int]:
        m = _NAME.match(s, i)
        if m is None:
            raise ValueError(f"invalid interpolation format in {s!r}")
        name = m.group(0)
        i = m.end()
        if s.startswith("}", i):
            return self._lookup(name), i + 1
        for op in (":-", ":?", ":+", "-", "?", "+"):
            if s.startswith(op, i):
                arg, end = self._scan(s, i + len(op), stop_at_brace=True)
                return self._apply(name, op, arg), end + 1
        raise ValueError(f"invalid interpolation format in {s!r}")

    def _apply(self, name: str, op: str, arg: str) -> str:
        present = name in self.env
        value = self.env.get(name, "")
        if op == ":-":
            return value if value != "" else arg
        if op == "-":
            return value if present else arg
        if op == ":?":
            if value == "":
                raise InterpolationError(name, arg)
            return value
        if op == "?":
            if not present:
                raise InterpolationError(name, arg)
            return value
        if op == ":+":
            return arg if value != "" else ""
        return arg if present else ""  # "+"

    def _lookup(self, name: str) -> str:
        if name not in self.env:
            self.unset.add(name)
            return ""
        return self.env[name]


def interpolate(s: str, env: Mapping[str, str]) -> str:
    return Interpolator(env).text(s)
