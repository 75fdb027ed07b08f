"""Time, injected: the executor and the simulator never call the wall clock directly.

`RealClock` is production. `ScaledClock(speed)` runs `speed` clock-seconds per real second, so
the simulator and the orchestrator can agree that a 50-minute cold start takes five real seconds
while every code path (timeouts, poll intervals, grace periods) stays the production one.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on this clock since an arbitrary origin."""

    async def sleep(self, seconds: float) -> None:
        """Sleep `seconds` of this clock's time."""


class RealClock:
    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class ScaledClock:
    """`speed` clock-seconds pass per real second (speed 600: 50 minutes in 5 seconds)."""

    def __init__(self, speed: float) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.speed = speed
        self._origin = time.monotonic()

    def monotonic(self) -> float:
        return (time.monotonic() - self._origin) * self.speed

    def real_seconds(self, seconds: float) -> float:
        return seconds / self.speed

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds) / self.speed)
