"""Settings from the environment, the server's own log, and the redactor that guards its answers."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import structlog
from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from orchestrator.hosts.redaction import Redactor, reveal


class ServerConfig(BaseSettings):
    """`ORCHESTRATOR_SERVER_*`.

    - `TOKEN`: the one shared bearer token (server and `--server` clients), for one-person use;
    - `TOKENS_FILE`: per-operator tokens (`orchestrate serve token add`), instead of `TOKEN`;
    - `CA`: the CA certificate file a `--server https://...` client trusts (pins) for the server.
    """

    model_config = SettingsConfigDict(
        env_prefix="ORCHESTRATOR_SERVER_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    token: SecretStr = SecretStr("")
    tokens_file: Path | None = None
    ca: Path | None = None


class ServerRedactor(Redactor):
    """The server's redactor, chained to the redactors of the sessions it runs.

    A run adds secrets as it learns them (the env map's values, to its session's redactor); the
    server's answers and log lines must hide those too, so `scrub` applies every attached one.
    """

    def __init__(self, *secrets: Any) -> None:
        self._attached: list[Redactor] = []
        self.own_secrets: list[str] = []
        super().__init__(*secrets)

    def add(self, *secrets: Any) -> ServerRedactor:
        super().add(*secrets)
        self.own_secrets.extend(t for t in (reveal(s) for s in secrets) if t and t not in self.own_secrets)
        return self

    def attach(self, other: Redactor) -> None:
        if other is not self and all(other is not r for r in self._attached):
            self._attached.append(other)

    def scrub(self, text: str) -> str:
        text = super().scrub(text)
        for other in list(self._attached):
            text = other.scrub(text)
        return text

    def contains_secret(self, text: str) -> bool:
        return super().contains_secret(text) or any(o.contains_secret(text) for o in list(self._attached))


class _Stderr:
    """structlog's output: whatever sys.stderr is at the time of the write."""

    def msg(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    def __getattr__(self, name: str) -> Any:
        return self.msg


def server_logger(redactor: Redactor) -> Any:
    """JSON lines on stderr, scrubbed. Bound to its own processors: `runner.execute` reconfigures
    structlog's global configuration to write each run's log file, and must not capture these."""
    return structlog.wrap_logger(
        _Stderr(),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            redactor.structlog_processor(),
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(20),
        cache_logger_on_first_use=False,
    ).bind(logger="orchestrator.server")  # log queries filter on it: stable whatever the package is called
