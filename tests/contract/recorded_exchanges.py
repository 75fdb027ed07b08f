"""The recorded exchanges with the real compose-manager (commit 8e07c35), as the contract tests
read them (imported by module name; not a conftest).

The recording clips long bodies: a body over 700 characters keeps its first 700 and ends with
`... [N chars]`; request bodies are clipped without a mark. A clipped JSON text is restored as its
longest complete prefix (`complete_prefix`): every value cut in the middle is dropped, every open
object/array closed, so what is left is exactly what the server sent, minus the tail. A clipped
NDJSON body keeps its complete lines (and, completed the same way, its cut last line).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Test data carried by the repository (tests/data/reference/README.md says where it comes from).
EXCHANGES = Path(__file__).resolve().parents[1] / "data" / "reference" / "samples" / "compose-manager-8e07c35" / "exchanges.jsonl"
_CLIP = re.compile(r"\.\.\. \[(\d+) chars\]$")


def complete_prefix(text: str, *, keep_cut_string: bool = False) -> Any:
    """The JSON value of the longest complete prefix of `text` (a clipped object or array).

    Scans once, remembering the last place where the text could be closed: right after a
    complete member value of an object or element of an array. With `keep_cut_string`, a string
    VALUE cut in the middle is kept as far as it goes (an escape cut in half dropped).
    """
    stack: list[str] = []  # "{" or "["
    expect_key: list[bool] = []
    i, n = 0, len(text)
    best: tuple[int, tuple[str, ...]] | None = None  # (cut at, containers open there)
    in_string = False
    string_start = 0
    string_is_key = False
    while i < n:
        ch = text[i]
        if in_string:
            if ch == "\\":
                i += 2
                continue
            if ch == '"':
                in_string = False
                if not string_is_key and stack:
                    best = (i + 1, tuple(stack))
            i += 1
            continue
        if ch == '"':
            in_string = True
            string_start = i
            string_is_key = bool(stack) and stack[-1] == "{" and expect_key[-1]
        elif ch in "{[":
            stack.append(ch)
            expect_key.append(ch == "{")
        elif ch in "}]":
            stack.pop()
            expect_key.pop()
            if stack:
                best = (i + 1, tuple(stack))
            else:
                return json.loads(text[: i + 1])
        elif ch == ":":
            expect_key[-1] = False
        elif ch == ",":
            if stack[-1] == "{":
                expect_key[-1] = True
        elif ch not in " \t\r\n":
            # a number, true, false, null: complete when the next delimiter shows
            j = i
            while j < n and text[j] not in ",}] \t\r\n":
                j += 1
            if j < n:
                best = (j, tuple(stack))
            i = j
            continue
        i += 1
    if in_string and keep_cut_string and not string_is_key and stack:
        body = text[string_start:]
        body = re.sub(r"\\(u[0-9a-fA-F]{0,3})?$", "", body)
        return json.loads(text[:string_start] + body + '"' + "".join("}" if c == "{" else "]" for c in reversed(stack)))
    if best is None:
        raise ValueError("no complete value in the clipped text")
    at, opened = best
    return json.loads(text[:at] + "".join("}" if c == "{" else "]" for c in reversed(opened)))


@dataclass(frozen=True)
class Exchange:
    index: int
    step: str
    method: str
    path: str
    request_body: str
    status: int
    content_type: str | None
    body: str
    total_chars: int | None  # the full body's length when the recording clipped it

    @property
    def clipped(self) -> bool:
        return self.total_chars is not None

    @property
    def visible(self) -> str:
        return _CLIP.sub("", self.body) if self.clipped else self.body

    @property
    def media_type(self) -> str | None:
        return self.content_type.split(";")[0].strip() if self.content_type else None

    def request(self) -> dict[str, Any] | None:
        """The request body (completed if clipped), or None when there was none."""
        if not self.request_body:
            return None
        try:
            return json.loads(self.request_body)
        except ValueError:
            return complete_prefix(self.request_body)

    def json_body(self, *, keep_cut_string: bool = False) -> Any:
        if not self.clipped:
            return json.loads(self.body)
        return complete_prefix(self.visible, keep_cut_string=keep_cut_string)

    def ndjson_events(self) -> list[dict[str, Any]]:
        """The stream's events; a clipped last line is completed (`complete_prefix`) when it can be."""
        lines = self.visible.split("\n")
        events = [json.loads(line) for line in (lines[:-1] if self.clipped else lines) if line.strip()]
        if self.clipped and lines[-1].strip():
            try:
                last = complete_prefix(lines[-1])
            except ValueError:
                last = None
            needs = {"stdout": "data", "stderr": "data", "done": "success"}
            if isinstance(last, dict) and isinstance(last.get("event"), str) and needs.get(last["event"], "event") in last:
                events.append(last)  # e.g. the dry run's `plan` event, cut after its plan
        return events

    @property
    def nonce(self) -> str | None:
        m = re.search(r"[?&]nonce=([^&]*)", self.path)
        return m.group(1) if m else None


def load_exchanges() -> list[Exchange]:
    out = []
    for i, line in enumerate(EXCHANGES.read_text().splitlines()):
        raw = json.loads(line)
        m = _CLIP.search(raw["body"])
        out.append(
            Exchange(
                index=i,
                step=raw["step"],
                method=raw["method"],
                path=raw["path"],
                request_body=raw["request_body"],
                status=raw["status"],
                content_type=raw["content_type"],
                body=raw["body"],
                total_chars=int(m.group(1)) if m else None,
            )
        )
    return out


EXCHANGE_LIST = load_exchanges()
