"""Two simulator defects this benchmark found, and their fixes applied in this process only.

Neither changes a file: both patch module attributes of `orchestrator_sim.fleet.sim_fleet` for the life of
the fleets built inside `simulator_fixes()`. The lead can apply them to the simulator for real
(docs/performance.md, "Recommended changes").

1. No TCP_NODELAY on the simulator's connections. `fleet/sim_fleet.py` binds its listening sockets with
   `socket.socket(AF_INET, SOCK_STREAM)` (proto 0) and hands them to uvicorn. asyncio disables
   Nagle's algorithm only on a transport whose socket says `proto == IPPROTO_TCP`, so every
   accepted connection keeps Nagle on; uvicorn writes a response's head and body separately, the
   body waits for the client's delayed ACK, and every request costs ~40-45 ms of idle wall time
   (measured: 45 ms per request as shipped, 2-3 ms fixed). Fix: create the sockets with
   `socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)` in `_bind()` and
   `_Listener.start()`. Patched here by giving `fleet/sim_fleet.py` a `socket` module whose `socket()` does so.

2. A 5 ms busy tick per fleet. `SimFleet._main` wakes every `TICK_S` = 5 ms to run due events and
   open/close the relay ports: ~3.5 % of a core per idle fleet, 70 % for 20 fleets in one process,
   all of it competing for the GIL with an orchestrator in the same process. Every request already
   runs the due events (`host.sync()`), so the tick only has to be frequent enough for the relay
   ports: 50 ms cuts 20 idle fleets to ~12 % of a core. Patched here by setting `TICK_S`.
"""

from __future__ import annotations

import contextlib
import socket as _socket
import time
from collections.abc import Iterator
from typing import Any

import orchestrator_sim.fleet.sim_fleet as fleet_module

SHIPPED_TICK_S = fleet_module.TICK_S
FIXED_TICK_S = 0.05


class _TcpSocketModule:
    """The `socket` module, except that an AF_INET stream socket is created with IPPROTO_TCP."""

    def __getattr__(self, name: str) -> Any:
        return getattr(_socket, name)

    @staticmethod
    def socket(family: int = -1, type: int = -1, proto: int = -1, fileno: int | None = None) -> _socket.socket:
        if family == _socket.AF_INET and type == _socket.SOCK_STREAM and proto in (-1, 0) and fileno is None:
            proto = _socket.IPPROTO_TCP
        return _socket.socket(family, type, proto, fileno)


_active: dict[str, int] = {"nodelay": 0, "tick": 0}


@contextlib.contextmanager
def simulator_fixes(*, nodelay: bool = True, tick: bool = True) -> Iterator[None]:
    """Keep this open for the whole life of the fleets it should apply to (re-entrant)."""
    if nodelay:
        if _active["nodelay"] == 0:
            fleet_module.socket = _TcpSocketModule()  # type: ignore[assignment]
        _active["nodelay"] += 1
    if tick:
        if _active["tick"] == 0:
            fleet_module.TICK_S = FIXED_TICK_S
        _active["tick"] += 1
    try:
        yield
    finally:
        if nodelay:
            _active["nodelay"] -= 1
            if _active["nodelay"] == 0:
                fleet_module.socket = _socket  # type: ignore[assignment]
        if tick:
            _active["tick"] -= 1
            if _active["tick"] == 0:
                fleet_module.TICK_S = SHIPPED_TICK_S


def label(fixed: bool) -> str:
    return "with the simulator fixes (TCP_NODELAY, 50 ms tick)" if fixed else "simulator as shipped"


def request_latency_ms(*, fixed: bool, n: int = 20) -> float:
    """Mean wall time of `GET /version` against a fresh in-process simulator (ms)."""
    import asyncio

    import httpx

    from orchestrator_sim import SimConfig, SimFleet

    with simulator_fixes(nodelay=fixed, tick=fixed), SimFleet(SimConfig(speed=1)) as fleet:
        async def go() -> float:
            async with httpx.AsyncClient(base_url=fleet.urls.compose_manager) as client:
                await client.get("/version")
                t0 = time.perf_counter()
                for _ in range(n):
                    await client.get("/version")
                return (time.perf_counter() - t0) / n * 1000
        return asyncio.run(go())


def idle_cpu_fraction(*, fleets: int, fixed: bool, seconds: float = 3.0) -> float:
    """CPU (fraction of one core) used by `fleets` idle simulated hosts in this process."""
    from orchestrator_sim import SimConfig, SimFleet

    with simulator_fixes(nodelay=fixed, tick=fixed):
        started = [SimFleet(SimConfig(speed=10)) for _ in range(fleets)]
        try:
            for f in started:
                f.start()
            time.sleep(0.5)
            c0, t0 = time.process_time(), time.monotonic()
            time.sleep(seconds)
            return (time.process_time() - c0) / (time.monotonic() - t0)
        finally:
            for f in started:
                f.stop()
