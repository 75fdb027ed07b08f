"""Waiting on events, never on the wall clock (imported as a module: `from waiting import wait_until`).

A test waits for what it expects to happen (a journal transition, a simulator state, a line of
output), polled until it holds or a deadline passes. The deadline is a safety net for a test that
would otherwise hang, never a timing assertion: it is generous, so a loaded machine is slower,
not wrong. When it passes, the failure names what was waited for and the last thing seen.

A negative assertion ("the run has not moved", "nothing was sent") never follows a sleep: it
follows an event showing that the system had its chance (the simulated clock went on, the run
polled again), so it cannot pass merely because the system was slow.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: Seconds before a wait gives up: a safety net sized for a loaded 2-core machine.
DEFAULT_TIMEOUT = 120.0
#: Seconds between two looks: short, so that a test goes on as soon as the event happened.
INTERVAL = 0.02


def wait_until(predicate: Callable[[], T], what: str, timeout: float = DEFAULT_TIMEOUT,
               interval: float = INTERVAL) -> T:
    """Call `predicate()` until it returns something truthy, and return that. After `timeout`
    seconds an AssertionError names `what` was waited for. An exception from the predicate
    propagates (e.g. an assertion that a process is still alive)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout:g} s waiting for {what} (last seen: {value!r})")
        time.sleep(interval)


async def wait_until_async(predicate: Callable[[], T | Awaitable[T]], what: str, timeout: float = DEFAULT_TIMEOUT,
                           interval: float = INTERVAL) -> T:
    """`wait_until` for a coroutine: the event loop runs on between two looks. `predicate` may
    be a plain function or return an awaitable."""
    deadline = time.monotonic() + timeout
    while True:
        value: Any = predicate()
        if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout:g} s waiting for {what} (last seen: {value!r})")
        await asyncio.sleep(interval)


def expire_lease(journal_location: str, host: str) -> None:
    """The host's lease has run out, as it would once its TTL passed on the journal's clock.

    A lease is live while `expires_at` is later than the journal's now (SQLite: this machine's
    clock; PostgreSQL: the database's). A test that needs an expired lease moves its expiry to its
    acquisition instead of sleeping through the TTL, so that every other process (a killed runner's
    successor on "another machine") sees it expired at once, and the runner that held it can keep
    a TTL long enough never to lapse on a loaded machine while it ran."""
    from orchestrator.journal import open_journal

    journal = open_journal(journal_location)
    try:
        with journal._tx(write=True) as tx:
            n = tx.run("UPDATE leases SET expires_at = acquired_at WHERE host = ? AND released_at IS NULL", host)
    finally:
        journal.close()
    assert n == 1, f"{host} holds no unreleased lease in {journal_location}"
