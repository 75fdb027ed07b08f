"""Time, injected: the executor and the simulator never call the wall clock directly. `ScaledClock`
lets them agree that a 50-minute cold start takes seconds while every code path stays production's.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import time
from typing import Protocol
from urllib.parse import urlsplit

from orchestrator.util.user_errors import UserError


class Clock(Protocol):
    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


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


TIME_SCALE_VAR = "ORCHESTRATOR_TIME_SCALE"


def _loopback(url: str) -> bool:
    host = (urlsplit(url).hostname or "").strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def clock_for(urls: list[str]) -> Clock:
    """`RealClock`, unless the test-only `ORCHESTRATOR_TIME_SCALE` is in the process environment
    (never `.env`) *and* every system is on loopback: a scaled clock can never make a healthy
    production engine "time out"."""
    raw = os.environ.get(TIME_SCALE_VAR, "").strip()
    if not raw:
        return RealClock()
    try:
        speed = float(raw)
    except ValueError:
        raise UserError(f"{TIME_SCALE_VAR}={raw!r} is not a number (it is a test-only switch: unset it)") from None
    if speed == 1.0:
        return RealClock()
    if not (0 < speed < 1e6):
        raise UserError(f"{TIME_SCALE_VAR} must be a positive number (it is a test-only switch: unset it)")
    remote = [u for u in urls if not _loopback(u)]
    if remote:
        raise UserError(f"{TIME_SCALE_VAR} is a test-only switch for the simulator on loopback, and this inventory names "
                        f"{remote[0]}: unset {TIME_SCALE_VAR}")
    return ScaledClock(speed)
