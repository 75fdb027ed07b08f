"""Recommended orchestrator-side changes, simulated in this process to measure their effect.

Nothing here changes a file; `orchestrator_changes()` patches, for the duration of the block:

1. One TLS context for every client. Each `httpx.AsyncClient(...)` the clients build (five per
   run in `host_clients.build_host_clients`, one more per soak-relay check) calls
   `httpx._config.create_ssl_context()`, which loads the certifi CA bundle: ~45-50 ms of blocking
   CPU per client (measured), ~0.35 s per run, ~7 s with the event loop blocked when 20 runs start
   together. The change: create the context once per process (`ssl.create_default_context(
   cafile=certifi.where())`) and pass it as `verify=` to every client. Simulated here by memoizing
   httpx's `create_ssl_context` for the default arguments.
2. `sniffio` installed. httpcore's `current_async_library()` does `import sniffio` on every request
   (about four times per request); it is not installed in this environment (httpx 0.28 / anyio 4
   no longer pull it in), so every call is a failed import that searches sys.path: ~67 us each,
   ~0.27 ms of CPU per request. The change: add `sniffio` to the dependencies. Simulated here by a
   stand-in module that answers "asyncio".

`libyaml_loader()` simulates a third one, for planning: `runbook.load_runbook` and
`inventory.load_inventory` parse with `yaml.safe_load` (the pure-Python loader, ~40 ms for the
runbook), where `compose_file.py` already uses libyaml's `CSafeLoader` (~3.5 ms for the same text).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import sys
import types
from collections.abc import Iterator
from typing import Any

import httpx._transports.default as httpx_default


@contextlib.contextmanager
def orchestrator_changes(enabled: bool = True) -> Iterator[None]:
    if not enabled:
        yield
        return
    original = httpx_default.create_ssl_context

    @functools.lru_cache(maxsize=8)
    def _cached(verify: Any, cert: Any, trust_env: bool) -> Any:
        return original(verify=verify, cert=cert, trust_env=trust_env)

    def create_ssl_context(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
        if verify is True and cert is None:
            return _cached(True, None, trust_env)
        return original(verify=verify, cert=cert, trust_env=trust_env)

    httpx_default.create_ssl_context = create_ssl_context  # type: ignore[assignment]
    stub = None
    if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
        stub = types.ModuleType("sniffio")
        stub.current_async_library = lambda: "asyncio"  # type: ignore[attr-defined]
        sys.modules["sniffio"] = stub
    try:
        yield
    finally:
        httpx_default.create_ssl_context = original  # type: ignore[assignment]
        if stub is not None and sys.modules.get("sniffio") is stub:
            del sys.modules["sniffio"]


def client_creation_ms(n: int = 5, *, changed: bool) -> float:
    """Mean wall time to build one `httpx.AsyncClient` (ms)."""
    import time

    import httpx

    with orchestrator_changes(changed):
        httpx.AsyncClient()  # warm imports
        t0 = time.perf_counter()
        for _ in range(n):
            httpx.AsyncClient()
        return (time.perf_counter() - t0) / n * 1000


def failed_sniffio_import_us(n: int = 2000) -> float:
    """Mean CPU of httpcore's `current_async_library()` as installed here (us), measured inside
    an event loop as httpcore calls it (with sniffio installed it raises outside one)."""
    import asyncio
    import time

    from httpcore._synchronization import current_async_library

    async def measure() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            current_async_library()
        return (time.perf_counter() - t0) / n * 1e6

    return asyncio.run(measure())


class _LibyamlModule:
    """The `yaml` module, except that `safe_load` parses with libyaml's CSafeLoader."""

    def __getattr__(self, name: str) -> Any:
        import yaml

        return getattr(yaml, name)

    @staticmethod
    def safe_load(stream: Any) -> Any:
        import yaml

        return yaml.load(stream, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader


@contextlib.contextmanager
def libyaml_loader(enabled: bool = True) -> Iterator[None]:
    if not enabled:
        yield
        return
    import orchestrator.hosts.inventory as inventory_module
    import orchestrator.language.runbook as runbook_module

    saved = runbook_module.yaml, inventory_module.yaml
    runbook_module.yaml = inventory_module.yaml = _LibyamlModule()  # type: ignore[assignment]
    try:
        yield
    finally:
        runbook_module.yaml, inventory_module.yaml = saved


@contextlib.contextmanager
def before_issue_25(enabled: bool = True) -> Iterator[None]:
    """The executor's own work as it was before issue 25, for a side-by-side run: `scrub_obj` walks
    every object (no JSON fast path) and the SQLite journal parses timestamps with strptime. (The
    log probes are a setting: `log_probe_interval=0` turns them off; the P1 runs are compressed
    past the probes' real-time floor anyway.)"""
    if not enabled:
        yield
        return
    from orchestrator.journal.sqlite import SqliteJournal
    from orchestrator.hosts.redaction import Redactor

    scrub, ts = Redactor.scrub_obj, SqliteJournal._ts_value
    Redactor.scrub_obj = Redactor._scrub_walk  # type: ignore[method-assign]
    SqliteJournal._ts_value = lambda self, raw: SqliteJournal._ts_strict(raw)  # type: ignore[method-assign]
    try:
        yield
    finally:
        Redactor.scrub_obj = scrub  # type: ignore[method-assign]
        SqliteJournal._ts_value = ts  # type: ignore[method-assign]
