"""The host inventory (`config/hosts.yaml`): where each host's services live; no secrets. Unknown
keys are errors, so a typo cannot silently drop a field."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, HttpUrl, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from orchestrator.util.user_errors import UserError

#: compose-manager 8e07c35 answers 400 `compose project name "work" is reserved` for these (the default: `work`).
RESERVED_PROJECTS = frozenset({"work", "dstack"})

#: libyaml's safe loader when available (3x faster)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HostEntry(_Strict):
    compose_manager_url: HttpUrl
    #: The host's instance name in the gpu-manager dashboard (where its env map lives).
    instance_name: str = Field(min_length=1)
    #: `ip:port` under which model-proxy lists this host.
    model_proxy_address: str = Field(pattern=r"^[^\s:]+:\d{1,5}$")
    #: OpenAI-compatible endpoint of the host's long domain.
    inference_endpoint: HttpUrl
    #: Base URL of the soak relay; the runbook names each replica's port (r1 :8008, r2 :8009).
    soak_relay_base_url: HttpUrl
    #: Optional runbook port -> reachable port (a tunnel, a port-forward, the simulator).
    soak_relay_port_map: dict[int, int] = Field(default_factory=lambda: {})
    available_ram_gib: float = Field(gt=0)
    #: Where the RAM figure came from (e.g. "MemAvailable on 2026-09-23 via the dashboard").
    available_ram_source: str = Field(min_length=1)
    gpus: int = Field(gt=0)
    #: a NON-default compose project only (`work`, the default, and `dstack` are reserved: 400)
    project: str | None = None
    #: the compose-files repository (`owner/name`) the host's compose-manager fetches tags from
    github_repo: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
    #: a Prometheus-compatible query API holding this host's SGLang series (`source: prometheus`)
    prometheus_url: HttpUrl | None = None
    #: env-map keys whose values are secrets whatever their names (`MY_DB_CREDS`)
    secret_keys: tuple[str, ...] = ()

    @field_validator("secret_keys")
    @classmethod
    def _env_key_names(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [k for k in v if not _ENV_KEY.fullmatch(k)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not an env var name ([A-Za-z_][A-Za-z0-9_]*)")
        return v

    @field_validator("project")
    @classmethod
    def _not_reserved(cls, v: str | None) -> str | None:
        if v in RESERVED_PROJECTS:
            raise PydanticCustomError("reserved", f"{v!r} is reserved (project: omit it for the default project)")
        return v

    def relay_url(self, port: int) -> str:
        base = str(self.soak_relay_base_url).rstrip("/")
        return f"{base}:{self.soak_relay_port_map.get(port, port)}"


class Inventory(_Strict):
    dashboard_url: HttpUrl
    model_proxy_peers: dict[str, HttpUrl]

    def urls(self) -> list[str]:
        """Every URL the inventory names (the time-scale guard checks they are all loopback)."""
        out = [str(self.dashboard_url)] + [str(u) for u in self.model_proxy_peers.values()]
        for h in self.hosts.values():
            out += [str(h.compose_manager_url), str(h.inference_endpoint), str(h.soak_relay_base_url)]
            out += [str(h.prometheus_url)] if h.prometheus_url is not None else []
        return out
    hosts: dict[str, HostEntry]

    @field_validator("model_proxy_peers")
    @classmethod
    def _two_peers(cls, v: dict[str, HttpUrl]) -> dict[str, HttpUrl]:
        if not v:
            raise ValueError("at least one model-proxy peer is required")
        return v

    def host(self, name: str) -> HostEntry:
        try:
            return self.hosts[name]
        except KeyError:
            known = ", ".join(sorted(self.hosts)) or "none"
            raise UserError(f"unknown host {name!r}: the inventory lists {known}; "
                            "add it to the inventory or fix the name") from None


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    return f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"


def load_inventory(path: Path) -> Inventory:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read inventory {path}: {exc.strerror}; "
                        "pass --inventory PATH or set ORCHESTRATOR_INVENTORY") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"inventory {path} is not UTF-8 text (byte {exc.start}); pass the YAML inventory") from None
    try:
        data = yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise UserError(f"inventory {path}{where} is not valid YAML; fix the file") from None
    if not isinstance(data, dict):
        raise UserError(f"inventory {path} must be a mapping with dashboard_url, model_proxy_peers, hosts")
    try:
        return Inventory.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"inventory {path} is invalid at {_first_error(exc)}") from None
