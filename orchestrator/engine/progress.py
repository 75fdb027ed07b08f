"""What the executor tells whoever watches a run (it never prints); every hook gets redacted text only."""

from __future__ import annotations

from typing import Any, Protocol


class Progress(Protocol):
    def event(self, kind: str, **fields: Any) -> None:
        """kind: run_started, step_started, waiting, log_line, effect, transition, run_finished, note."""


class NullProgress:
    def event(self, kind: str, **fields: Any) -> None:
        return None


class CompositeProgress:
    """Hands every event to each part; one that raises does not stop the others (nor the run)."""

    def __init__(self, *parts: Progress) -> None:
        self.parts = parts

    def event(self, kind: str, /, **fields: Any) -> None:
        for part in self.parts:
            try:
                part.event(kind, **fields)
            except Exception:  # watching a run must never break it
                pass
