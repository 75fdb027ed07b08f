"""Client-side timing of every HTTP request the orchestrator sends from this process.

While `HttpTimings` is active, `httpx.AsyncClient.send` is wrapped (class attribute, this process
only) to note (port, start, end, path) on the real clock: from the moment a request is handed to
httpx to the moment its response is read (for a streamed compose up/down: to the response head;
the operation itself is a mandatory wait anyway). A run's requests are told apart by the ports of
its simulator. This separates "the orchestrator waited for an answer" from "the orchestrator was
working", which the simulator's own record cannot do (it only sees a request once it has parsed it).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class HttpTiming:
    port: int
    start: float  # time.monotonic()
    end: float
    path: str


class HttpTimings:
    _lock = threading.Lock()
    _depth = 0
    _original: Any = None
    _sink: list[HttpTiming] = []

    def __enter__(self) -> HttpTimings:
        cls = type(self)
        with cls._lock:
            if cls._depth == 0:
                cls._sink = []
                cls._original = httpx.AsyncClient.send
                original = cls._original

                async def send(client: httpx.AsyncClient, request: httpx.Request, *args: Any, **kwargs: Any) -> Any:
                    t0 = time.monotonic()
                    try:
                        return await original(client, request, *args, **kwargs)
                    finally:
                        cls._sink.append(HttpTiming(request.url.port or 0, t0, time.monotonic(), request.url.path))

                httpx.AsyncClient.send = send  # type: ignore[method-assign]
            cls._depth += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        cls = type(self)
        with cls._lock:
            cls._depth -= 1
            if cls._depth == 0:
                httpx.AsyncClient.send = cls._original  # type: ignore[method-assign]

    @classmethod
    def for_ports(cls, ports: set[int], since: float = 0.0, until: float = float("inf")) -> list[HttpTiming]:
        return [t for t in list(cls._sink) if t.port in ports and since <= t.start <= until]


def fleet_ports(urls: Any) -> set[int]:
    """The ports of one simulated host's servers (a `FleetUrls`, or a dict of the same shape)."""
    def port(u: str) -> int:
        return int(u.rsplit(":", 1)[1].split("/")[0])

    get = (lambda k: urls[k]) if isinstance(urls, dict) else (lambda k: getattr(urls, k))
    out = {port(get("compose_manager")), port(get("dashboard")), port(get("inference"))}
    out |= {port(u) for u in get("peers").values()}
    out |= {port(u) for u in get("relay").values()}
    return out
