"""Configuration from the environment (prefix ORCHESTRATOR_) and an optional `.env` file. Tokens are
`SecretStr` (only the HTTP clients reveal them). With nothing set, state lives under XDG's state
directory, so that every shell of one user meets the same journal and leases; the inventory is the
first found of `--inventory`, `$ORCHESTRATOR_INVENTORY`, `./config/hosts.yaml` and XDG's config
directory (util/names.py). A bad value is one line naming the variable (`load_settings`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, PrivateAttr, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from orchestrator.util.names import InventoryChoice, choose_inventory, default_state_dir
from orchestrator.util.user_errors import UserError

HOST_TOKENS = ("compose_manager_token", "dashboard_token", "model_proxy_token", "inference_token")
JOURNAL_URL_PREFIXES = ("postgresql://", "postgres://", "sqlite:///")


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

    #: Explicit inventory (ORCHESTRATOR_INVENTORY or --inventory); None: searched (`inventory_choice`).
    inventory: Path | None = None
    state_dir: Path = Field(default_factory=default_state_dir)
    #: Seconds between polls of docker/ps, logs and peers while a gate is waited on.
    poll_interval: float = Field(default=10.0, gt=0, allow_inf_nan=False)
    #: Seconds between the cheap log probes (`--tail 1`) an engine's cold-start gate sends between
    #: two polls: a failure line is seen within this, not within a poll interval; 0 turns them off.
    log_probe_interval: float = Field(default=1.75, ge=0, allow_inf_nan=False)
    #: `postgresql://...` selects the shared PostgreSQL journal (team mode); empty: SQLite in state_dir.
    database_url: str = ""
    #: Lease time-to-live in seconds; the runner renews it every third of that.
    lease_ttl: float = Field(default=120.0, gt=0, allow_inf_nan=False)
    #: Team notifications (orchestrator/service/notify.py): a webhook called when a run waits for an
    #: approval and when it ends. A secret (a Slack webhook URL is its own credential): redacted.
    notify_url: SecretStr = SecretStr("")
    #: `slack` ({"text": ...}, also Mattermost/Rocket.Chat/Teams-compatible) or `json` (the fields).
    notify_format: Literal["slack", "json"] = "slack"
    #: The URL people reach `orchestrate serve` at (e.g. https://orchestrate.internal:8443): the
    #: notifications link to the run's page there. Empty: no link.
    public_url: str = ""

    _inventory_source: str = PrivateAttr(default="ORCHESTRATOR_INVENTORY")

    @field_validator("inventory", mode="before")
    @classmethod
    def _empty_inventory(cls, v: Any) -> Any:
        return None if isinstance(v, str) and not v.strip() else v

    @field_validator("database_url")
    @classmethod
    def _journal_url(cls, v: str) -> str:
        v = v.strip()
        if v and not v.startswith(JOURNAL_URL_PREFIXES):
            scheme = v.split("://", 1)[0] + "://" if "://" in v else "a value without a scheme"
            # the value itself may hold a password: only its scheme is named
            raise ValueError(f"must be postgresql://... (team mode) or sqlite:///PATH, not {scheme}")
        return v

    def with_inventory(self, path: Path | None) -> Settings:
        if path is None:
            return self
        s = self.model_copy(update={"inventory": path})
        s._inventory_source = "--inventory"
        return s

    def inventory_choice(self) -> InventoryChoice:
        return choose_inventory(self.inventory, self._inventory_source)

    def inventory_path(self) -> Path:
        choice = self.inventory_choice()
        if choice.path is None:
            raise UserError("no host inventory: pass --inventory PATH, set ORCHESTRATOR_INVENTORY, or create "
                            + " or ".join(str(p) for p in choice.searched))
        return choice.path

    def journal_url(self) -> str:
        """What the journal is opened from: the database URL (with its password) or the SQLite file."""
        return self.database_url or str(self.state_dir / "journal.sqlite3")

    def journal_location(self) -> str:
        """The journal as shown to a person or written to a log: a database URL's password masked."""
        if not self.database_url:
            return self.journal_url()
        try:
            parts = urlsplit(self.database_url)
            password = parts.password
        except ValueError:
            return "the database of ORCHESTRATOR_DATABASE_URL"
        if password is None:
            return self.database_url
        user = parts.netloc.rpartition("@")[0].split(":", 1)[0]
        return urlunsplit(parts._replace(netloc=f"{user}:***@{parts.netloc.rpartition('@')[2]}"))

    def database_password(self) -> str | None:
        """The password in ORCHESTRATOR_DATABASE_URL, if any (a secret like the tokens)."""
        try:
            return urlsplit(self.database_url).password if self.database_url else None
        except ValueError:
            return None

    def tokens(self) -> list[str]:
        values = [getattr(self, name).get_secret_value() for name in (*HOST_TOKENS, "github_token", "notify_url")]
        return [v for v in (*values, self.database_password() or "") if v]

    def require_host_tokens(self, what: str) -> None:
        """Refuse before any run or lease exists when a host token is missing (else the first call
        crashes with the run unfinished and the host leased)."""
        missing = [f"ORCHESTRATOR_{name.upper()}" for name in HOST_TOKENS
                   if not getattr(self, name).get_secret_value().strip()]
        if missing:
            raise UserError(f"{what} needs {', '.join(missing)}: set {'it' if len(missing) == 1 else 'them'} "
                            f"in the environment or .env (nothing was started)")


def describe_validation_error(exc: ValidationError) -> str:
    """One line for the first invalid setting: the variable and what is wrong, never the value
    (it may be a token or a database URL with a password)."""
    err = exc.errors()[0]
    field = str(err["loc"][0]) if err.get("loc") else "?"
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"ORCHESTRATOR_{field.upper()} (environment or .env) is invalid: {msg}{more}; fix or unset it"


def load_settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        raise UserError(describe_validation_error(exc)) from None
