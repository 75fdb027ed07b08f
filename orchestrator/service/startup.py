"""Opening what a command needs, with every failure a user can fix as one UserError line.

`open_journal_for` opens the settings' journal (SQLite under the state directory, or PostgreSQL);
`ReadSession` is the journal alone, for the commands that only read runs or record an operator
signal (`status`, `runs`, `approve`, `abort`): they need no inventory and no host token.
`read_settings` gives those commands their settings without pydantic when the environment is
plainly valid (else the full `load_settings`, whose one-line error stands).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from orchestrator.hosts.redaction import Redactor
from orchestrator.util.user_errors import UserError

if TYPE_CHECKING:
    from orchestrator.journal.base import Journal
    from orchestrator.util.settings import Settings


def open_journal_for(settings: Settings, redactor: Redactor) -> Journal:
    """The settings' journal; a location that cannot be opened is one UserError line (exit 2).
    The message never holds the database password."""
    from orchestrator.journal import open_journal
    from orchestrator.journal.base import JournalError

    loc = settings.journal_location()
    try:
        if not settings.database_url:
            settings.state_dir.mkdir(parents=True, exist_ok=True)
        return open_journal(loc, redactor=redactor)
    except (OSError, JournalError) as exc:
        text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        where = "ORCHESTRATOR_DATABASE_URL" if settings.database_url else f"ORCHESTRATOR_STATE_DIR ({settings.state_dir})"
        scrub = Redactor()
        try:
            password = urlsplit(settings.database_url).password if settings.database_url else None
        except ValueError:
            password = None
        if password:
            scrub.add(password)
        text = " ".join(scrub.scrub(text).split())  # libpq's messages span lines
        raise UserError(f"cannot open the journal: {text}; check {where}") from None


@dataclass
class ReadSession:
    """The journal and the settings: what `Session` offers the read-only commands."""

    settings: Settings
    journal: Journal

    @classmethod
    def open(cls, settings: Settings) -> ReadSession:
        redactor = Redactor()
        redactor.add(*settings.tokens())
        return cls(settings, open_journal_for(settings, redactor))

    def close(self) -> None:
        self.journal.close()


# --------------------------------------------------------------------------- settings without pydantic

_PREFIX = "orchestrator_"
_SECRETS = ("compose_manager_token", "dashboard_token", "model_proxy_token", "inference_token", "github_token",
            "notify_url")
_TEXTS = ("github_api_url", "public_url")
#: float fields: (default, the bound, whether the bound itself is allowed)
_FLOATS = {"poll_interval": (10.0, 0.0, False), "log_probe_interval": (1.75, 0.0, True), "lease_ttl": (120.0, 0.0, False)}
_FLOAT_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_JOURNAL_URL_PREFIXES = ("postgresql://", "postgres://", "sqlite:///")


class _Secret:
    """What `SecretStr` offers the read paths: the value, only through get_secret_value()."""

    def __init__(self, value: str) -> None:
        self._value = value

    def get_secret_value(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "_Secret('**********')" if self._value else "_Secret('')"


@dataclass
class ReadSettings:
    """The settings the read-only commands use (the journal's location, the inventory chosen,
    the secrets to redact), read from the environment as `Settings` reads it."""

    values: dict[str, Any] = field(default_factory=dict)
    inventory: Path | None = None
    state_dir: Path = field(default_factory=lambda: _default_state_dir())
    database_url: str = ""
    _inventory_source: str = "ORCHESTRATOR_INVENTORY"

    def __getattr__(self, name: str) -> Any:
        values = self.__dict__.get("values", {})
        if name in _SECRETS:
            return _Secret(values.get(name, ""))
        if name in _TEXTS:
            return values.get(name, "https://api.github.com" if name == "github_api_url" else "")
        if name in _FLOATS:
            return values.get(name, _FLOATS[name][0])
        if name == "notify_format":
            return values.get(name, "slack")
        raise AttributeError(name)

    def with_inventory(self, path: Path | None) -> ReadSettings:
        if path is None:
            return self
        return ReadSettings(self.values, path, self.state_dir, self.database_url, "--inventory")

    def inventory_choice(self) -> Any:
        from orchestrator.util.names import choose_inventory

        return choose_inventory(self.inventory, self._inventory_source)

    def inventory_path(self) -> Path:
        """The inventory to load, or a UserError naming every place searched."""
        from orchestrator.util.names import required_inventory

        return required_inventory(self.inventory_choice())

    def journal_location(self) -> str:
        return self.database_url or str(self.state_dir / "journal.sqlite3")

    def tokens(self) -> list[str]:
        return [v for v in (self.values.get(name, "") for name in _SECRETS) if v]


def _default_state_dir() -> Path:
    from orchestrator.util.names import default_state_dir

    return default_state_dir()


def _plain_environment() -> dict[str, str] | None:
    """Every ORCHESTRATOR_* setting of the process environment, when `Settings` would take each
    as it is; None when anything needs pydantic's judgement (a .env file, a value to convert or
    refuse, a name given twice)."""
    if os.path.exists(".env"):
        return None
    from orchestrator.util.names import LOCAL_INVENTORY  # noqa: F401 - (names: no pydantic)

    known = {*_SECRETS, *_TEXTS, *_FLOATS, "notify_format", "inventory", "state_dir", "database_url"}
    out: dict[str, str] = {}
    for key, value in os.environ.items():
        low = key.lower()
        if not low.startswith(_PREFIX):
            continue
        name = low[len(_PREFIX):]
        if name not in known:
            continue
        if name in out:
            return None
        out[name] = value
    for name, (_, bound, inclusive) in _FLOATS.items():
        if name in out:
            text = out[name]
            if not _FLOAT_RE.fullmatch(text):
                return None
            number = float(text)
            if not math.isfinite(number) or number < bound or (number == bound and not inclusive):
                return None
    if "notify_format" in out and out["notify_format"] not in ("slack", "json"):
        return None
    if "state_dir" in out and not out["state_dir"].strip():
        return None
    if "database_url" in out:
        url = out["database_url"].strip()
        if url and not url.startswith(_JOURNAL_URL_PREFIXES):
            return None
    return out


def read_settings(inventory: Path | None = None) -> Any:
    """The read-only commands' settings: a `ReadSettings` when the environment is plainly valid,
    else the full `Settings` (an invalid variable: its one UserError line)."""
    env = _plain_environment()
    if env is None:
        from orchestrator.util.settings import load_settings

        return load_settings().with_inventory(inventory)
    values: dict[str, Any] = {k: v for k, v in env.items() if k in _SECRETS or k in _TEXTS or k == "notify_format"}
    values.update({k: float(env[k]) for k in _FLOATS if k in env})
    inv = env.get("inventory")
    settings = ReadSettings(values, Path(inv) if inv is not None and inv.strip() else None,
                            Path(env["state_dir"]) if "state_dir" in env else _default_state_dir(),
                            env.get("database_url", "").strip())
    return settings.with_inventory(inventory)
