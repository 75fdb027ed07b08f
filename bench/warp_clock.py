"""A scaled clock whose speed can change while it runs, shared by a simulator and an orchestrator.

Trials need minutes of simulated setup (a 5-minute stop grace, a pull, a cold start) before the
few simulated seconds that are measured. With one `WarpClock` object given to both sides, the
setup runs at a high speed and the measured window at a low one, so that the orchestrator's real
work per poll (a few milliseconds) stays small against the poll interval once converted to
simulation seconds. Time stays continuous: `monotonic()` is piecewise linear in real time.

`sleep(s)` sleeps `s` seconds of this clock even across speed changes: it wakes at least every
`max_chunk_s` real seconds and re-plans the rest at the current speed.
"""

from __future__ import annotations

import asyncio
import threading
import time


class WarpClock:
    def __init__(self, speed: float, *, max_chunk_s: float = 0.02) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self._lock = threading.Lock()
        self._real0 = time.monotonic()
        self._sim0 = 0.0
        self._speed = float(speed)
        self.max_chunk_s = max_chunk_s

    @property
    def speed(self) -> float:
        return self._speed

    def set_speed(self, speed: float) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        with self._lock:
            now = time.monotonic()
            self._sim0 += (now - self._real0) * self._speed
            self._real0 = now
            self._speed = float(speed)

    def monotonic(self) -> float:
        with self._lock:
            return self._sim0 + (time.monotonic() - self._real0) * self._speed

    def real_seconds(self, seconds: float) -> float:
        return seconds / self._speed

    async def sleep(self, seconds: float) -> None:
        target = self.monotonic() + max(0.0, seconds)
        while True:
            remaining = target - self.monotonic()
            if remaining <= 0:
                return
            await asyncio.sleep(min(remaining / self._speed, self.max_chunk_s))
