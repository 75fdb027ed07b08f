"""What the executor tells whoever watches a run: humans (rich, in the CLI) or machines (JSON).

The executor calls these hooks; it never prints. Every hook receives only redacted text.
"""

from __future__ import annotations

from typing import Any, Protocol


class Progress(Protocol):
    def event(self, kind: str, **fields: Any) -> None:
        """kind: run_started, step_started, waiting, log_line, effect, transition, run_finished, note."""


class NullProgress:
    def event(self, kind: str, **fields: Any) -> None:
        return None


class RecordingProgress:
    """Keeps every event (tests, `--json` summaries)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def event(self, kind: str, **fields: Any) -> None:
        self.events.append((kind, fields))


class CompositeProgress:
    """Hands every event to each of `parts` in turn; one part that raises does not stop the others
    (watching a run, or notifying about it, must never break it)."""

    def __init__(self, *parts: Progress) -> None:
        self.parts = parts

    def event(self, kind: str, /, **fields: Any) -> None:
        for part in self.parts:
            try:
                part.event(kind, **fields)
            except Exception:  # see the class docstring
                pass
