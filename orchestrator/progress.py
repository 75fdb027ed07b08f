"""What the executor tells whoever watches a run: humans (rich, in the CLI) or machines (JSON).

The executor calls these hooks; it never prints. Every hook receives only redacted text.
"""

from __future__ import annotations

from typing import Any, Protocol


class Progress(Protocol):
    def event(self, kind: str, **fields: Any) -> None:
        """kind: run_started, step_started, waiting, log_line, effect, transition, run_finished, note."""


class NullProgress:
    def event(self, kind: str, **fields: Any) -> None:  # noqa: D401 - protocol
        return None


class RecordingProgress:
    """Keeps every event (tests, `--json` summaries)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def event(self, kind: str, **fields: Any) -> None:
        self.events.append((kind, fields))
