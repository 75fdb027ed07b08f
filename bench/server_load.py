"""`python -m bench.server_load`: can a crowd knock `orchestrate serve` over? (issue 24)

Starts a real `orchestrate serve` (its own process, loopback, a throwaway SQLite journal with a
few runs) and measures, with the figures docs/team-mode.md records:

1. **burst**: `--clients` (200) concurrent clients, each on its own connection, each sending
   `--requests` (5) requests alternating `GET /healthz` and `GET /runs` (with the token); errors
   (anything but 200, or no answer within 10 s) and latency p50/p95/p99/max. The clients come
   from `--client-addresses` (8) loopback source addresses (a team is several machines; one NAT
   address for everyone needs `--max-connections-per-address` raised to the team's size);
2. **held**: `--held` (100) connections held from another address (127.0.0.2): half of them
   POST /runs without a token whose body trickles in at one byte every 2 s, half of them
   half-sent request headers (re-opened when the server closes them); meanwhile `--clients` (50
   by default here: `--held-clients`) authenticated clients from 127.0.0.1 send requests for
   `--seconds` (30): errors and latency while held, and how many of the held connections the
   server was still holding at the end (it closes the slow ones);
3. **one address**: 400 connections opened from one address (127.0.0.3) and held idle: how many
   the server accepted (the per-address cap) and whether 127.0.0.1 is still served.

Run it against another checkout (the "before" figures) by putting that checkout first on the
path: `PYTHONPATH=/path/to/old/checkout python -m bench.server_load` (the server subprocess
inherits PYTHONPATH). It is a measurement, not a test: it prints a table and exits 0 unless the
server did not start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

TOKEN = "load-test-token-7d3c1f0a9b2e4d6f8a1c3e5b7d9f0a2c"
INVENTORY = """\
dashboard_url: http://127.0.0.1:9
model_proxy_peers:
  peer-a: http://127.0.0.1:9
hosts:
  gpu02:
    compose_manager_url: http://127.0.0.1:9
    instance_name: gpu02
    model_proxy_address: 127.0.0.2:8444
    inference_endpoint: http://127.0.0.1:9
    soak_relay_base_url: http://127.0.0.1
    available_ram_gib: 1223
    available_ram_source: test
    gpus: 8
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(state: Path, port: int) -> subprocess.Popen[bytes]:
    inv = state / "inventory.yaml"
    inv.write_text(INVENTORY)
    # a few runs in the journal, so GET /runs reads something
    from orchestrator.journal import SqliteJournal

    j = SqliteJournal(state / "journal.sqlite3")
    for _ in range(20):
        j.create_run(host="gpu02", runbook="gpu02-glm53-w4afp8-long-context", tag="v0.0.300", kind="rollout",
                     state="INIT", context={})
    j.close()
    env = {**os.environ, "ORCHESTRATOR_SERVER_TOKEN": TOKEN, "ORCHESTRATOR_STATE_DIR": str(state),
           "ORCHESTRATOR_INVENTORY": str(inv), "ORCHESTRATOR_DATABASE_URL": ""}
    env.pop("ORCHESTRATOR_SERVER_TOKENS_FILE", None)
    code = "import sys; from orchestrator.cli import main; sys.argv[0] = 'orchestrate'; main()"
    proc = subprocess.Popen([sys.executable, "-c", code, "serve", "--bind", "127.0.0.1", "--port", str(port),
                             "--no-adopt"], env=env, cwd=state, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code in (200, 503):
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"the server did not start on port {port}")


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    k = min(len(values) - 1, max(0, int(round(p / 100 * (len(values) - 1)))))
    return values[k]


async def _request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> int:
    """One keep-alive GET by hand (httpx's own cost per request would be measured otherwise)."""
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    if length:
        await reader.readexactly(length)
    return status if b"connection: close" not in head.lower() else -status  # negative: closed after it


async def client(base: str, source: str, n: int | None, until: float | None, start: asyncio.Event,
                 lat: list[float], errors: list[str]) -> None:
    """One client on one keep-alive connection from `source` (re-opened if the server closes it)."""
    port = int(base.rsplit(":", 1)[1])
    await start.wait()
    conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    i = 0
    while (n is not None and i < n) or (until is not None and time.monotonic() < until):
        path = "/healthz" if i % 2 == 0 else "/runs"
        t0 = time.perf_counter()
        try:
            if conn is None:
                conn = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0)), 10)
            status = await asyncio.wait_for(_request(*conn, path), 10)
            if status < 0:
                status = -status
                conn[1].close()
                conn = None
            if status != 200:
                errors.append(f"{path} {status}")
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
            errors.append(f"{path} {type(exc).__name__}")
            if conn is not None:
                conn[1].close()
            conn = None
        lat.append(time.perf_counter() - t0)
        i += 1
        if until is not None:
            await asyncio.sleep(0.05)
    if conn is not None:
        conn[1].close()


async def burst(base: str, clients: int, requests: int, addresses: int) -> dict[str, Any]:
    lat: list[float] = []
    errors: list[str] = []
    start = asyncio.Event()
    tasks = [asyncio.create_task(client(base, f"127.0.1.{1 + i % addresses}", requests, None, start, lat, errors))
             for i in range(clients)]
    await asyncio.sleep(0.5)
    t0 = time.perf_counter()
    start.set()
    await asyncio.gather(*tasks)
    took = time.perf_counter() - t0
    return {"requests": len(lat), "errors": len(errors), "error_kinds": sorted(set(errors))[:6],
            "p50_ms": pct(lat, 50) * 1000, "p95_ms": pct(lat, 95) * 1000, "p99_ms": pct(lat, 99) * 1000,
            "max_ms": max(lat) * 1000, "seconds": took}


async def hold_slow_body(port: int, source: str, stop: asyncio.Event, held: list[int]) -> None:
    """POST /runs without a token, its body one byte every 2 s; re-opened when closed."""
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
        except OSError:
            await asyncio.sleep(0.5)
            continue
        held[0] += 1
        try:
            writer.write(b"POST /runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100000\r\n\r\n")
            await writer.drain()
            while not stop.is_set():
                writer.write(b" ")
                await writer.drain()
                try:
                    data = await asyncio.wait_for(reader.read(1024), timeout=2.0)
                    if not data:
                        break  # the server answered and closed, or closed
                except TimeoutError:
                    continue
        except (OSError, ConnectionError):
            pass
        finally:
            held[0] -= 1
            writer.close()
        await asyncio.sleep(2.0)  # then open another: the attack keeps its count, it does not flood


async def hold_half_headers(port: int, source: str, stop: asyncio.Event, held: list[int]) -> None:
    """Request headers that never end (one byte every 2 s); re-opened when closed."""
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
        except OSError:
            await asyncio.sleep(0.5)
            continue
        held[0] += 1
        try:
            writer.write(b"GET /runs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            await writer.drain()
            while not stop.is_set():
                writer.write(b"a")
                await writer.drain()
                try:
                    data = await asyncio.wait_for(reader.read(1024), timeout=2.0)
                    if not data:
                        break
                except TimeoutError:
                    continue
        except (OSError, ConnectionError):
            pass
        finally:
            held[0] -= 1
            writer.close()
        await asyncio.sleep(2.0)  # then open another: the attack keeps its count, it does not flood


async def held(base: str, port: int, n_held: int, clients: int, seconds: float) -> dict[str, Any]:
    stop = asyncio.Event()
    count = [0]
    attackers = [asyncio.create_task((hold_slow_body if i % 2 == 0 else hold_half_headers)(port, "127.0.0.2", stop, count))
                 for i in range(n_held)]
    await asyncio.sleep(3.0)  # let them all get in
    at_start = count[0]
    lat: list[float] = []
    errors: list[str] = []
    start = asyncio.Event()
    until = time.monotonic() + seconds
    tasks = [asyncio.create_task(client(base, "127.0.0.1", None, until, start, lat, errors)) for _ in range(clients)]
    start.set()
    await asyncio.gather(*tasks)
    at_end = count[0]
    stop.set()
    await asyncio.gather(*attackers, return_exceptions=True)
    return {"held_at_start": at_start, "held_at_end": at_end, "requests": len(lat), "errors": len(errors),
            "error_kinds": sorted(set(errors))[:6], "p50_ms": pct(lat, 50) * 1000, "p99_ms": pct(lat, 99) * 1000,
            "max_ms": max(lat) * 1000 if lat else float("nan")}


async def one_address(base: str, port: int, n: int) -> dict[str, Any]:
    socks: list[Any] = []
    refused = 0
    for _ in range(n):
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.3", 0))
        except OSError:
            refused += 1
            continue
        socks.append((reader, writer))
    await asyncio.sleep(1.0)
    answered_503 = 0
    open_now = 0
    for reader, writer in socks:
        try:
            data = await asyncio.wait_for(reader.read(64), timeout=0.01)
            if data.startswith(b"HTTP/1.1 503"):
                answered_503 += 1
            elif data:
                open_now += 1
        except TimeoutError:
            open_now += 1  # still held by the server
    lat: list[float] = []
    errors: list[str] = []
    start = asyncio.Event()
    start.set()
    await client(base, "127.0.0.1", 10, None, start, lat, errors)
    for _, writer in socks:
        writer.close()
    return {"opened": n, "held_by_server": open_now, "refused_503": answered_503, "connect_refused": refused,
            "other_address_errors": len(errors), "other_address_p99_ms": pct(lat, 99) * 1000}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.server_load", description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--requests", type=int, default=5)
    ap.add_argument("--client-addresses", type=int, default=8)
    ap.add_argument("--held", type=int, default=100)
    ap.add_argument("--held-clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--one-address", type=int, default=400)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = ap.parse_args(argv)
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    with tempfile.TemporaryDirectory(prefix="server-load-") as tmp:
        port = free_port()
        proc = start_server(Path(tmp), port)
        base = f"http://127.0.0.1:{port}"
        try:
            import orchestrator

            out: dict[str, Any] = {"orchestrator": str(Path(orchestrator.__file__).parent.parent),
                                   "cpus": os.cpu_count(), "load_before": os.getloadavg()[0]}
            out["burst"] = asyncio.run(burst(base, args.clients, args.requests, args.client_addresses))
            time.sleep(1)
            out["held"] = asyncio.run(held(base, port, args.held, args.held_clients, args.seconds))
            time.sleep(1)
            out["one_address"] = asyncio.run(one_address(base, port, args.one_address))
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return 0
    b, h, o = out["burst"], out["held"], out["one_address"]
    print(f"checkout: {out['orchestrator']}; {out['cpus']} CPUs, load average {out['load_before']:.1f} at the start")
    print(f"burst: {args.clients} clients x {args.requests} requests from {args.client_addresses} addresses: "
          f"{b['errors']} errors of {b['requests']} {b['error_kinds']}; p50 {b['p50_ms']:.0f} ms, "
          f"p95 {b['p95_ms']:.0f} ms, p99 {b['p99_ms']:.0f} ms, max {b['max_ms']:.0f} ms")
    print(f"held: {args.held} slow/half-open connections from 127.0.0.2 ({h['held_at_start']} open at the start, "
          f"{h['held_at_end']} at the end); {args.held_clients} clients for {args.seconds:g} s: {h['errors']} errors of "
          f"{h['requests']} {h['error_kinds']}; p50 {h['p50_ms']:.0f} ms, p99 {h['p99_ms']:.0f} ms, max {h['max_ms']:.0f} ms")
    print(f"one address: {o['opened']} idle connections from 127.0.0.3: {o['held_by_server']} held, "
          f"{o['refused_503']} answered 503; another address: {o['other_address_errors']} errors, "
          f"p99 {o['other_address_p99_ms']:.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
