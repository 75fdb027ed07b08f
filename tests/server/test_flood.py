"""A flood without a token cannot deny the server to a client with one.

A real uvicorn over TLS on loopback with small caps (48 connections, 8 of them kept for token
holders, 12 per /24, 6 per address, a 2 s header timeout) is flooded from 12 addresses in four
/24s of 127/8 (127.0.10.x .. 127.0.13.x): 72 connections kept open at all times, half stalled
TLS handshakes (no ClientHello), half half-sent requests after a handshake, each reopened as soon
as the server drops it. Meanwhile a client with the token makes requests on fresh connections,
alternately from a /24 of its own and from an address inside a flood /24: each is answered 200
(how fast is a speed goal, measured by bench/server_load.py, not asserted here). The flood fills the unauthenticated room (its peak equals the cap) and the server
makes room by evicting idle flood connections.

Bounded: the flood opens at most `MAX_OPENED` connections and stops when the client is done;
the client's requests are paced by the flood's progress (events), not by sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
import time

import httpx

from helpers_server import AUTH, TOKEN, CountingAdmission, build_test_server, wait_for
from orchestrator.teamserver import serving
from orchestrator.teamserver.app import create_app

TOTAL, RESERVE, PER_NETWORK, PER_ADDRESS = 48, 8, 12, 6
FLOOD_NETWORKS = [f"127.0.{n}" for n in range(10, 14)]
ADDRESSES_PER_NETWORK = 3
SLOTS_PER_ADDRESS = 6
MAX_OPENED = 4000
REQUESTS_PER_SOURCE = 12
#: The client's own /24, and an address inside a flood /24 that the flood does not use.
LEGIT_SOURCES = ("127.0.20.1", "127.0.10.200")


class Flood:
    """The attackers: an event loop in a thread holding `slots` connections open."""

    def __init__(self, port: int, ctx: ssl.SSLContext) -> None:
        self.port = port
        self.ctx = ctx
        self.opened = 0
        self.dropped = 0  # connections the server closed, reset or refused
        self.progress = threading.Condition()
        self.stop = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._run(),), daemon=True)

    def _opened(self) -> None:
        with self.progress:
            self.opened += 1
            self.progress.notify_all()

    async def _slot(self, source: str, stall: bool) -> None:
        while not self.stop.is_set() and self.opened < MAX_OPENED:
            writer = None
            try:
                if stall:  # TCP only: the server waits for a ClientHello that never comes
                    reader, writer = await asyncio.open_connection("127.0.0.1", self.port, local_addr=(source, 0))
                    self._opened()
                else:  # a handshake, then a request whose headers never end
                    reader, writer = await asyncio.wait_for(asyncio.open_connection(
                        "127.0.0.1", self.port, ssl=self.ctx, server_hostname="127.0.0.1",
                        local_addr=(source, 0)), 10)
                    self._opened()
                    writer.write(b"GET /runs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                await reader.read(1)  # until the server drops it (timeout, eviction or refusal)
            except (TimeoutError, OSError, ssl.SSLError, asyncio.IncompleteReadError):
                pass
            finally:
                self.dropped += 1
                if writer is not None:
                    writer.transport.abort()
            await asyncio.sleep(0.1)  # pacing of the reconnect: the flood's own CPU, not a wait for an outcome

    async def _run(self) -> None:
        tasks = [asyncio.ensure_future(self._slot(f"{net}.{host}", stall=(i % 2 == 0)))
                 for net in FLOOD_NETWORKS for host in range(1, ADDRESSES_PER_NETWORK + 1)
                 for i in range(SLOTS_PER_ADDRESS)]
        while not self.stop.is_set() and self.opened < MAX_OPENED:
            await asyncio.sleep(0.05)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def wait_for_more(self, since: int, count: int, timeout: float = 15.0) -> int:
        """Block until the flood opened `count` more connections since `since` (its progress event)."""
        with self.progress:
            ok = self.progress.wait_for(lambda: self.opened >= since + count or self.opened >= MAX_OPENED, timeout)
        assert ok, "the flood made no progress"
        return self.opened


def test_an_authenticated_client_is_served_throughout_a_flood(settings, tls_files, monkeypatch):
    cert, key, ctx = tls_files
    monkeypatch.setattr(serving, "Admission", CountingAdmission)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = build_test_server(create_app(settings, token=TOKEN, adopt=False), port, monkeypatch, log_level="error",
                               access_log=False, tls_cert=cert, tls_key=key, header_timeout_s=2.0,
                               limit_concurrency=TOTAL, reserve=RESERVE, per_network=PER_NETWORK, per_address=PER_ADDRESS)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    flood = Flood(port, ctx)
    admission = server.admission
    timings: list[tuple[str, float, int | str]] = []
    try:
        wait_for(lambda: server.started, "uvicorn to start", timeout=15)
        flood.thread.start()
        cap = TOTAL - RESERVE
        wait_for(lambda: admission.unauthenticated >= cap, "the flood to fill the unauthenticated room", timeout=15)
        seen = flood.opened
        for i in range(REQUESTS_PER_SOURCE * len(LEGIT_SOURCES)):
            source = LEGIT_SOURCES[i % len(LEGIT_SOURCES)]
            seen = flood.wait_for_more(seen, 10)  # interleaved with the flood's churn
            transport = httpx.HTTPTransport(local_address=source, verify=ctx, retries=0)
            with httpx.Client(transport=transport, timeout=30) as client:
                t0 = time.monotonic()
                try:
                    status: int | str = client.get(f"https://127.0.0.1:{port}/runs", headers=AUTH).status_code
                except httpx.HTTPError as exc:  # refused, reset or timed out: a failure to report
                    status = repr(exc)
                timings.append((source, time.monotonic() - t0, status))
    finally:
        flood.stop.set()
        flood.thread.join(timeout=20)
        server.should_exit = True
        thread.join(timeout=20)
    refused = [t for t in timings if t[2] != 200]
    assert not refused, f"answers not 200 (source, seconds, status): {refused}"
    assert len(timings) == REQUESTS_PER_SOURCE * len(LEGIT_SOURCES)
    # the flood did fill what it may hold, and the server made room by evicting idle flood connections
    assert admission.peak_unauthenticated == TOTAL - RESERVE
    assert admission.evicted >= len(timings) // 2
    assert flood.opened > 100 and flood.dropped > 50
    with contextlib.suppress(Exception):
        flood.loop.close()
