"""`orchestrate serve`: rollouts that outlive the laptop that asked for them (team mode).

The package, by role:

- `app`: the starlette app factory and its routes;
- `worker`: runs submissions as asyncio tasks through `runner.execute`, as the CLI would;
- `schemas`: the request bodies (bounded fields) and their one-line validation messages;
- `auth`: bearer tokens (one shared token, or a tokens file of named, role-bearing operators);
- `guards`: Host, Origin, Content-Type, body size and JSON depth checks before any route;
- `metrics`: the Prometheus registry, journal numbers from a snapshot refreshed off the event loop;
- `config`: environment settings, the server's log and its redactor;
- `serving`: uvicorn with TLS, timeouts, connection cap and an access log without query strings;
- `cli`: `orchestrate serve` and `orchestrate serve token add`;
- `client` and `remote`: the `--server URL` side of the CLI.

Importing the package is cheap: names below load their module on first use (the CLI imports
`orchestrator.teamserver.cli` at start-up and must not pay for starlette and uvicorn).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "create_app": "app", "serve": "serving", "ServerConfig": "config", "journal_kind": "config",
    "Worker": "worker", "ActiveRun": "worker", "run_serve": "cli", "remote": "remote",
    "ServerClient": "client",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(name)
    return getattr(importlib.import_module(f"orchestrator.teamserver.{module}"), name)


__all__ = sorted(_EXPORTS)
