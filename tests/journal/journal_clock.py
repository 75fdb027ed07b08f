"""A journal clock that only moves when a test says so."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

START = datetime(2026, 11, 30, 8, 12, 0, tzinfo=UTC)


class FakeClock:
    """The journal's `now`: wall-clock time that only moves when a test says so."""

    def __init__(self, start: datetime = START) -> None:
        self._t = start
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._t

    def advance(self, seconds: float) -> datetime:
        with self._lock:
            self._t += timedelta(seconds=seconds)
            return self._t
