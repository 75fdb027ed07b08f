"""Configuration from the environment (prefix ORCHESTRATOR_) and an optional `.env` file.

Tokens are `SecretStr`: they print as `**********` and only `.get_secret_value()` reveals them,
which only the HTTP clients call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_INVENTORY = Path("config/hosts.yaml")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="ORCHESTRATOR_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    compose_manager_token: SecretStr = SecretStr("")
    dashboard_token: SecretStr = SecretStr("")
    model_proxy_token: SecretStr = SecretStr("")
    inference_token: SecretStr = SecretStr("")
    #: Optional GitHub token for the tag checks (unauthenticated: 60 requests an hour per IP).
    github_token: SecretStr = SecretStr("")
    #: GitHub REST API base URL (the simulator points it at loopback).
    github_api_url: str = "https://api.github.com"

    inventory: Path = DEFAULT_INVENTORY
    state_dir: Path = Path(".state")
    #: Seconds between polls of docker/ps, logs and peers while a gate is waited on.
    poll_interval: float = Field(default=10.0, gt=0)
    #: `postgresql://...` selects the shared PostgreSQL journal (team mode); empty: SQLite in state_dir.
    database_url: str = ""
    #: Lease time-to-live in seconds; the runner renews it every third of that.
    lease_ttl: float = Field(default=120.0, gt=0)
    #: Team notifications (orchestrator/notify.py): a webhook called when a run waits for an
    #: approval and when it ends. A secret (a Slack webhook URL is its own credential): redacted.
    notify_url: SecretStr = SecretStr("")
    #: `slack` ({"text": ...}, also Mattermost/Rocket.Chat/Teams-compatible) or `json` (the fields).
    notify_format: Literal["slack", "json"] = "slack"
    #: The URL people reach `orchestrate serve` at (e.g. https://orchestrate.internal:8443): the
    #: notifications link to the run's page there. Empty: no link.
    public_url: str = ""
    # The clock is never a setting: ORCHESTRATOR_TIME_SCALE is a test-only switch read from the
    # process environment, honoured only against a loopback simulator (orchestrator.clock.clock_for).

    def journal_location(self) -> str:
        return self.database_url or str(self.state_dir / "journal.sqlite3")

    def tokens(self) -> list[str]:
        """Every configured secret, for the redactor."""
        return [
            s.get_secret_value()
            for s in (
                self.compose_manager_token,
                self.dashboard_token,
                self.model_proxy_token,
                self.inference_token,
                self.github_token,
                self.notify_url,
            )
            if s.get_secret_value()
        ]
