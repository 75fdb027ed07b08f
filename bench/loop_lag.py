"""Event-loop lag: how late a 10 ms `asyncio.sleep` wakes up, sampled for the life of a batch.

A late wake-up means something held the loop (CPU work between awaits, a blocking call) or the
thread waited for the GIL: every coroutine on that loop, each executor's next poll included, was
delayed as much.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

from bench.stats import summary

T = TypeVar("T")
PERIOD_S = 0.01


async def with_loop_lag(main: Awaitable[T]) -> tuple[T, dict[str, Any]]:
    samples: list[tuple[float, float]] = []
    t_start = time.monotonic()

    async def monitor() -> None:
        while True:
            t = time.monotonic()
            await asyncio.sleep(PERIOD_S)
            samples.append((t - t_start, time.monotonic() - t - PERIOD_S))

    task = asyncio.ensure_future(monitor())
    try:
        result = await main
    finally:
        task.cancel()
    lags = [lag * 1000 for _, lag in samples]
    first = [lag * 1000 for at, lag in samples if at < 10.0]
    stats = {"lag_ms": summary(lags), "max_lag_first_10s_ms": max(first) if first else None,
             "time_lagging_over_50ms_s": sum(lag for lag in lags if lag > 50) / 1000}
    return result, stats
