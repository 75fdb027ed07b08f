"""A `Progress` (orchestrator/engine/progress.py) that keeps every event, for the tests to read."""

from __future__ import annotations

from typing import Any


class RecordingProgress:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def event(self, kind: str, **fields: Any) -> None:
        self.events.append((kind, fields))
