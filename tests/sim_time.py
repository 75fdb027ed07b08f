"""A simulated time that a loaded machine cannot squeeze (imported as a module by e2e tests).

With `ScaledClock(3000)` a simulated minute is 20 ms of real time, and every real millisecond a
request waits for the simulator (a busy CPU, a slow loopback) is three simulated seconds gone: a
30-minute analysis window on a loaded machine may hold a single scrape per replica, and the run
halts for "not enough traffic" although the same run on an idle machine passes.

`AnswerTimeClock` is that ScaledClock, except that its time stands still while any request of
the orchestrator awaits the simulator's answer (its transport holds the clock from the request
until the response's body is read; a compose-manager stream, whose body lasts as long as the
simulated operation, only until its headers). Shared by the simulator (`SimFleet(clock=...)`) and the
orchestrator (`Session.open(clock=..., transport=clock.transport())`), simulated time then passes
only while the orchestrator waits on the clock.

`clock.run(coro)` runs the orchestrator on an event loop whose time stands still while the loop
computes too (parsing a scrape, judging a window, writing the journal): the clock runs only while
the loop waits in its selector. In production that compute takes milliseconds of a 30-minute
window; on a loaded test machine it can take a second of real time, minutes of simulated time at
600x. With `run`, how many polls a window holds follows from the runbook, not from the load.

`SteppedClock` moves only when the test moves it: for a simulator test that asserts a state that
lasts a few simulated seconds (a restart's back-off), which a loaded machine would skip past.
"""

from __future__ import annotations

import asyncio
import selectors
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, TypeVar

import httpx

from orchestrator.util.clock import ScaledClock

T = TypeVar("T")


class AnswerTimeClock(ScaledClock):
    """`speed` clock-seconds per real second, none while a request awaits the simulator's answer."""

    def __init__(self, speed: float) -> None:
        super().__init__(speed)
        self._lock = threading.Lock()  # the simulator reads the clock from its own thread
        self._held = 0  # requests awaiting their answer
        self._held_since = 0.0  # real time at which the clock stopped
        self._stopped = 0.0  # real seconds the clock stood still before that

    def monotonic(self) -> float:
        with self._lock:
            now = time.monotonic()
            stopped = self._stopped + (now - self._held_since if self._held else 0.0)
        return (now - self._origin - stopped) * self.speed

    async def sleep(self, seconds: float) -> None:
        """Until `seconds` have passed on this clock (a sleep that overlaps a held answer lasts longer)."""
        end = self.monotonic() + max(0.0, seconds)
        while (left := end - self.monotonic()) > 0:
            await asyncio.sleep(left / self.speed)

    def hold(self) -> None:
        with self._lock:
            if self._held == 0:
                self._held_since = time.monotonic()
            self._held += 1

    def release(self) -> None:
        with self._lock:
            self._held -= 1
            if self._held == 0:
                self._stopped += time.monotonic() - self._held_since

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        """`asyncio.run(main)` on a loop that holds this clock except while it waits in its selector."""
        self.hold()
        try:
            with asyncio.Runner(loop_factory=lambda: asyncio.SelectorEventLoop(_WaitingSelector(self))) as runner:
                return runner.run(main)
        finally:
            self.release()

    def transport(self) -> HoldingTransport:
        """httpx's own transport, holding this clock while each request awaits its answer."""
        return HoldingTransport(self, httpx.AsyncHTTPTransport())


class HoldingTransport(httpx.AsyncBaseTransport):
    """Shared by every client of a session: closing one client leaves it open; `close()` ends it."""

    def __init__(self, clock: AnswerTimeClock, inner: httpx.AsyncHTTPTransport) -> None:
        self.clock, self.inner = clock, inner
        self.requests = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        self.clock.hold()
        try:
            response = await self.inner.handle_async_request(request)
        except BaseException:
            self.clock.release()
            raise
        if response.headers.get("content-type", "").startswith("application/x-ndjson"):
            self.clock.release()  # a stream of a simulated operation: it needs the clock to run
            return response
        return httpx.Response(response.status_code, headers=response.headers, extensions=response.extensions,
                              stream=_HeldBody(self.clock, response.stream))

    async def aclose(self) -> None:
        """A client closing: the transport stays open for the session's other clients."""

    async def close(self) -> None:
        await self.inner.aclose()


class _HeldBody(httpx.AsyncByteStream):
    """A response body read with the clock held; released once, when the body is closed."""

    def __init__(self, clock: AnswerTimeClock, inner: httpx.AsyncByteStream) -> None:
        self.clock, self.inner, self.held = clock, inner, True

    async def __aiter__(self):  # type: ignore[override]
        async for chunk in self.inner:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self.inner.aclose()
        finally:
            if self.held:
                self.held = False
                self.clock.release()


class _WaitingSelector(selectors.DefaultSelector):
    """The event loop's selector: the clock it is given runs only while `select` waits."""

    def __init__(self, clock: AnswerTimeClock) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        self._clock.release()
        try:
            return super().select(timeout)
        finally:
            self._clock.hold()


class SteppedClock(ScaledClock):
    """Simulated time that moves only when the test moves it."""

    def __init__(self) -> None:
        super().__init__(1.0)
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def run(self, call: Callable[[], T]) -> T:
        """`call()` in a thread, the clock stepping a simulated second at a time until it returns
        (a compose call's operation takes simulated time: its stop grace, its pulls)."""
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(call)
            while not wait([answer], timeout=0.002).done:
                self.t += 1.0
            return answer.result()
