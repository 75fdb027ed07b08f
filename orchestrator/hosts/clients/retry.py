"""Retry policy for the clients (tenacity under the hood). Three budgets, counted separately:

- Transient failures (`TransportError`, `ServerError`), only where safe: any failure of a read;
  for a mutating call only a `TransportError` with `request_sent=False` (nothing reached the
  server). Jittered exponential backoff (each wait in [base/2, base], base doubling up to
  `max_backoff_s`), at most `max_attempts`, never waiting past `deadline_s`.
- `Busy` (409, the server refused: safe even when mutating): `busy_wait_s`, at most
  `busy_retries` times, whatever the deadline (a pull or build may take longer).
- `TagNotFound`: compose-manager 8e07c35 reports ANY GitHub failure (a rate limit, an outage) as
  `tag not found`, before docker runs: retried `tag_not_found_retries` times, the wait doubling.

When a budget is spent the last error is re-raised as is. Waits go through the injected `Clock`.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import structlog
from tenacity import AsyncRetrying, RetryCallState

from orchestrator.hosts.clients.errors import Busy, ServerError, TagNotFound, TransportError
from orchestrator.util.clock import Clock, RealClock

log = structlog.get_logger(__name__)

T = TypeVar("T")


@dataclass
class RetryPolicy:
    deadline_s: float = 60
    max_attempts: int = 6
    initial_backoff_s: float = 0.5
    max_backoff_s: float = 8
    busy_retries: int = 5
    busy_wait_s: float = 5
    tag_not_found_retries: int = 3
    tag_not_found_wait_s: float = 20

    def backoff(self, transient_failures: int) -> float:
        """The wait after the n-th transient failure (n >= 1): jittered exponential."""
        base = min(self.max_backoff_s, self.initial_backoff_s * (2 ** max(0, transient_failures - 1)))
        return base / 2 + random.random() * base / 2


async def call_with_retry(fn: Callable[[], Awaitable[T]], policy: RetryPolicy, *, mutating: bool, what: str,
                          clock: Clock | None = None) -> T:
    """Run `fn` under `policy`; `what` names the call in log events."""
    clock = clock or RealClock()
    started = clock.monotonic()
    # failures per budget ("busy", "tag", "transient"), and the budget of the last one
    spent: Counter[str] = Counter()
    last = ""

    def should_retry(state: RetryCallState) -> bool:
        nonlocal last
        exc = state.outcome.exception() if state.outcome else None
        if exc is None:
            return False
        transient = isinstance(exc, ServerError | TransportError) and (
            not mutating or (isinstance(exc, TransportError) and not exc.request_sent))
        last = ("busy" if isinstance(exc, Busy) else "tag" if isinstance(exc, TagNotFound)
                else "transient" if transient else "")
        spent[last] += 1
        return bool(last)

    def wait(_state: RetryCallState) -> float:
        if last == "busy":
            return policy.busy_wait_s
        if last == "tag":
            return policy.tag_not_found_wait_s * (2 ** max(0, spent["tag"] - 1))
        return policy.backoff(spent["transient"])

    def stop(state: RetryCallState) -> bool:
        if last == "busy":
            return spent["busy"] > policy.busy_retries
        if last == "tag":
            return spent["tag"] > policy.tag_not_found_retries
        if spent["transient"] >= policy.max_attempts:
            return True
        return clock.monotonic() - started + (state.upcoming_sleep or 0.0) > policy.deadline_s

    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.info("client.retry", call=what, error=type(exc).__name__ if exc else None,
                 system=getattr(exc, "system", None), status=getattr(exc, "status", None),
                 attempt=state.attempt_number, wait_s=round(state.upcoming_sleep, 3))

    retrying = AsyncRetrying(sleep=clock.sleep, retry=should_retry, wait=wait, stop=stop, before_sleep=before_sleep,
                             reraise=True)
    return await retrying(fn)
