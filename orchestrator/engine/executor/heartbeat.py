"""Renew the host lease every third of its TTL while the executor runs.

A transient journal error is retried with backoff within that third; a lease lost or fenced, or a
renewal failing until the lease would expire, stops the run at once (`RunnerFenced`, exit 4).
"""

from __future__ import annotations

import asyncio

from tenacity import AsyncRetrying, retry_if_not_exception_type, stop_after_delay, wait_exponential

from orchestrator.engine.executor.loop import Executor, RunnerFenced
from orchestrator.journal.base import Fenced, LeaseLost, RunRecord
from orchestrator.journal.sql import Journal


async def run_with_heartbeat(executor: Executor, journal: Journal, ttl_s: float) -> RunRecord:
    lost: list[BaseException] = []

    async def renew() -> None:
        # keep trying until a third of the TTL is left: the lease must not lapse while we act
        async for attempt in AsyncRetrying(
            stop=stop_after_delay(max(ttl_s / 3, 0.1)),
            wait=wait_exponential(multiplier=0.05, max=max(ttl_s / 12, 0.1)),
            retry=retry_if_not_exception_type((LeaseLost, Fenced)),
            reraise=True,
        ):
            with attempt:
                executor.rt.lease = journal.heartbeat(executor.rt.lease, ttl_s)

    main = asyncio.current_task()
    assert main is not None

    async def beat() -> None:
        while True:
            await asyncio.sleep(ttl_s / 3)
            try:
                await renew()
            except Exception as exc:  # lost, fenced, or the journal unreachable for too long
                lost.append(exc)
                main.cancel()
                return

    hb = asyncio.create_task(beat())
    try:
        return await executor.run_to_end()
    except asyncio.CancelledError:
        if lost:
            exc = lost[0]
            if isinstance(exc, (LeaseLost, Fenced)):
                raise RunnerFenced(str(exc)) from None
            raise RunnerFenced(f"the lease could not be renewed ({type(exc).__name__}: {exc}); stopped before it expired") from None
        raise
    finally:
        hb.cancel()
