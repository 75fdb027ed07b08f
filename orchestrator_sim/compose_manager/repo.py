"""The simulated compose-files repository (tags -> commits -> files) and the compose model the
simulated docker compose works from: services after interpolation, their config hashes, and the
few facts the simulator reads out of a file (an engine's GPU slot, the proxy's pool, the soak
relay's routes)."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from orchestrator_sim.compose_manager.interpolation import Interpolator

COMPOSE_DIR = Path(__file__).parent.parent / "compose"
TAGS_FILE = COMPOSE_DIR / "tags.yaml"

PREVIOUS_TAG = "v0.0.290"
TARGET_TAG = "v0.0.300"
PREVIOUS_FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-Canary.yaml"
TARGET_FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"

# The base tier (gpu03, gpu04, gpu23): the canonical FP8 file (#293's merge) is deployed at
# BASE_PREVIOUS_TAG; BASE_TARGET_TAG (#295, ~60 h old) adds the W4AFP8 base-tier file.
BASE_HOSTS = ("gpu03", "gpu04", "gpu23")
BASE_PREVIOUS_TAG = "v0.0.300"
BASE_TARGET_TAG = "v0.0.310"
BASE_CANONICAL_FILE = "prod/GLM-5.3-Flash-SGL-TP4.yaml"
BASE_TARGET_FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8.yaml"

# The roles the simulator gives some services of gpu02's files.
PROXY_SERVICE = "proxy-glm53"
RELAY_SERVICE = "glm53-soak-relay"
REGISTRAR_SERVICE = "model-proxy-registrar"
NGINX_SERVICE = "nginx"
DOWNLOADER_SERVICE = "model-downloader"

# Fields docker compose leaves out of com.docker.compose.config-hash.
_HASH_EXCLUDED = ("profiles", "depends_on", "build", "pull_policy", "scale")

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|us|ns|h|m|s)")


def parse_duration(text: str | int | float | None, default: float = 10.0) -> float:
    """A compose duration (`5m`, `1m30s`, `10s`) in seconds."""
    if text is None:
        return default
    if isinstance(text, (int, float)):
        return float(text)
    total, pos = 0.0, 0
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
    for m in _DURATION.finditer(text.strip()):
        if m.start() != pos:
            raise ValueError(f"invalid duration {text!r}")
        total += float(m.group(1)) * scale[m.group(2)]
        pos = m.end()
    if pos != len(text.strip()):
        raise ValueError(f"invalid duration {text!r}")
    return total


# ------------------------------------------------------------------------------ repository
@dataclass(frozen=True)
class TagInfo:
    name: str
    commit: str
    age_hours: float  # age of the tag's commit when the simulation starts
    files: tuple[str, ...]


@dataclass(frozen=True)
class InitialAction:
    action: str
    tag: str
    file: str
    hours_ago: float
    services: tuple[str, ...]


@dataclass
class SimRepository:
    name: str
    min_tag_age_hours: float
    tags: dict[str, TagInfo]
    initial_project: str
    initial_actions: tuple[InitialAction, ...]
    compose_dir: Path = COMPOSE_DIR
    base_initial_actions: tuple[InitialAction, ...] = ()
    long_context_initial_actions: tuple[InitialAction, ...] = ()

    @classmethod
    def load(cls, path: Path = TAGS_FILE) -> SimRepository:
        raw = yaml.safe_load(path.read_text())
        tags = {
            name: TagInfo(name=name, commit=t["commit"], age_hours=float(t["age_hours"]), files=tuple(t["files"]))
            for name, t in raw["tags"].items()
        }
        init = raw["initial_deployment"]

        def actions_of(section: dict[str, Any] | None) -> tuple[InitialAction, ...]:
            return tuple(
                InitialAction(
                    action=a["action"],
                    tag=a["tag"],
                    file=a["file"],
                    hours_ago=float(a["hours_ago"]),
                    services=tuple(a["services"]),
                )
                for a in (section or {}).get("actions", [])
            )

        actions = actions_of(init)
        return cls(
            name=raw["repository"],
            min_tag_age_hours=float(raw["min_tag_age_hours"]),
            tags=tags,
            initial_project=init["project"],
            initial_actions=actions,
            compose_dir=path.parent,
            base_initial_actions=actions_of(raw.get("base_initial_deployment")),
            long_context_initial_actions=actions_of(raw.get("long_context_initial_deployment")),
        )

    def for_base_host(self) -> SimRepository:
        """The same repository as a base-tier host starts from (its own initial deployment)."""
        return replace(self, initial_actions=self.base_initial_actions)

    def after_294(self) -> SimRepository:
        """gpu02 as #294 left it (the canaries start here): `long_context_initial_deployment`."""
        return replace(self, initial_actions=self.long_context_initial_actions)

    def tag(self, name: str) -> TagInfo | None:
        return self.tags.get(name)

    def file_text(self, tag: str, path: str) -> str | None:
        info = self.tags.get(tag)
        if info is None or path not in info.files:
            return None
        at_tag = self.compose_dir / "tags" / tag / path  # a file that differs at this tag (a canary)
        return (at_tag if at_tag.exists() else self.compose_dir / path).read_text()

    # Faults rewrite the history the simulator serves.
    def with_tag_age(self, tag: str, age_hours: float) -> SimRepository:
        tags = dict(self.tags)
        tags[tag] = replace(tags[tag], age_hours=age_hours)
        return replace(self, tags=tags)

    def without_tag(self, tag: str) -> SimRepository:
        return replace(self, tags={k: v for k, v in self.tags.items() if k != tag})


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# ------------------------------------------------------------------------------ compose model
@dataclass(frozen=True)
class ServiceDef:
    name: str
    container_name: str
    image: str
    profiles: tuple[str, ...]
    depends_on: dict[str, str]  # service -> condition
    restart: str
    stop_grace_s: float
    environment: dict[str, str]
    command: str
    labels: dict[str, str]
    device_ids: tuple[str, ...]
    config_sources: tuple[str, ...]
    has_healthcheck: bool
    config_hash: str  # com.docker.compose.config-hash: the service body, never inline config contents
    ports: tuple[tuple[int, int], ...] = ()  # (host port, container port), as published
    #: what the service's inline `configs:` entries hold (their `content:`), hashed: compose keeps it
    #: out of its change detection (docker/compose#11900), the simulator keeps it to know the difference
    content_hash: str = ""

    @property
    def is_engine(self) -> bool:
        return "sglang serve" in self.command

    @property
    def slot(self) -> str | None:
        """Replica slot of an engine: r1 = GPUs 0-3, r2 = GPUs 4-7."""
        if not self.is_engine:
            return None
        ids = set(self.device_ids)
        if ids == {"0", "1", "2", "3"}:
            return "r1"
        if ids == {"4", "5", "6", "7"}:
            return "r2"
        return None

    @property
    def is_hicache(self) -> bool:
        return self.is_engine and "SGLANG_HICACHE_RAM_BUDGET" in self.environment

    @property
    def is_oneshot(self) -> bool:
        return self.restart in ("no", "") and self.name != RELAY_SERVICE


@dataclass
class ComposeFile:
    path: str
    tag: str
    commit: str
    sha256: str
    services: dict[str, ServiceDef]
    configs: dict[str, str]
    unset_variables: tuple[str, ...] = ()
    order: tuple[str, ...] = field(default_factory=tuple)

    def default_services(self) -> list[str]:
        """`up` without a services list: every service that sits under no profile."""
        return [s for s in self.order if not self.services[s].profiles]

    def closure(self, names: list[str]) -> list[str]:
        """The named services plus everything they depend on, dependencies first."""
        out: list[str] = []

        def visit(name: str, stack: tuple[str, ...]) -> None:
            if name in out or name in stack:
                return
            for dep in self.services[name].depends_on:
                if dep in self.services:
                    visit(dep, stack + (name,))
            out.append(name)

        for n in names:
            visit(n, ())
        return out

    def relay_routes(self, service: str = RELAY_SERVICE) -> dict[int, str]:
        """The soak relay's listen port -> backend container, read from its nginx config."""
        svc = self.services.get(service)
        if svc is None:
            return {}
        routes: dict[int, str] = {}
        for source in svc.config_sources:
            text = self.configs.get(source, "")
            for block in re.split(r"\bserver\s*\{", text)[1:]:
                port = re.search(r"listen\s+(\d+)", block)
                backend = re.search(r"set\s+\$backend\s+https?://([A-Za-z0-9_.-]+)", block)
                if port and backend:
                    routes[int(port.group(1))] = backend.group(1)
        return routes

    def proxy_pool(self, service: str = PROXY_SERVICE) -> list[str]:
        """The inference proxy's upstream containers, from VLLM_BACKEND_URLS."""
        svc = self.services.get(service)
        if svc is None:
            return []
        urls = svc.environment.get("VLLM_BACKEND_URLS", "")
        return [urlparse(u.strip()).hostname or "" for u in urls.split(",") if u.strip()]


def _env_dict(raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return {str(k): "" if v is None else str(v) for k, v in raw.items()}
    out: dict[str, str] = {}
    for item in raw:
        key, sep, value = str(item).partition("=")
        if sep:
            out[key] = value
    return out


def _labels_dict(raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return {str(k): str(v) for k, v in raw.items()}
    return _env_dict(raw)


def _depends(raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if isinstance(raw, list):
        return {str(d): "service_started" for d in raw}
    return {str(k): str((v or {}).get("condition", "service_started")) for k, v in raw.items()}


def _device_ids(svc: dict[str, Any]) -> tuple[str, ...]:
    try:
        devices = svc["deploy"]["resources"]["reservations"]["devices"]
    except (KeyError, TypeError):
        return ()
    ids: list[str] = []
    for d in devices or []:
        ids.extend(str(i) for i in d.get("device_ids", []) or [])
    return tuple(ids)


def _ports(raw: Any) -> tuple[tuple[int, int], ...]:
    """Published ports in the short syntax (`"8444:443"`), as (host, container) pairs."""
    out: list[tuple[int, int]] = []
    for item in raw or []:
        parts = str(item).split("/")[0].split(":")
        if len(parts) >= 2 and parts[-1].isdigit() and parts[-2].isdigit():
            out.append((int(parts[-2]), int(parts[-1])))
    return tuple(out)


def config_hash(service: dict[str, Any]) -> str:
    """compose's config hash: the service's own definition. A `configs:` entry is hashed as the
    reference the service makes to it (source, target), never the inline content it points to:
    docker/compose#11900 (open; #13045 in 2.38.2), so a change of content alone recreates nothing."""
    body = {k: v for k, v in service.items() if k not in _HASH_EXCLUDED}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def content_hash(service: dict[str, Any], configs: Mapping[str, str]) -> str:
    """The inline contents of the service's `configs:` entries (empty when it has none)."""
    sources = [c["source"] if isinstance(c, dict) else str(c) for c in service.get("configs", []) or []]
    if not sources:
        return ""
    return hashlib.sha256(json.dumps({s: configs.get(s, "") for s in sources}, sort_keys=True).encode()).hexdigest()


#: compose releases from which inline `configs:` content exists (2.23.1) and is left out of change
#: detection (docker/compose#11900, still open: no release fixes it yet).
INLINE_CONFIGS_IGNORED_SINCE = (2, 23, 1)
INLINE_CONFIGS_FIXED_IN: tuple[int, ...] | None = None


def inline_config_changes_ignored(compose_version: str) -> bool:
    """True when the compose release `compose_version` (what docker ps's
    com.docker.compose.version label reports) does not recreate a service whose only change is
    the content of an inline config."""
    parts = tuple(int(x) for x in re.findall(r"\d+", compose_version)[:3])
    if parts < INLINE_CONFIGS_IGNORED_SINCE:
        return False
    return INLINE_CONFIGS_FIXED_IN is None or parts < INLINE_CONFIGS_FIXED_IN


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@lru_cache(maxsize=16)
def parse_compose_yaml(text: str) -> dict[str, Any]:
    """Parsed once per text; callers copy before changing anything."""
    return yaml.load(text, Loader=_YAML_LOADER)  # noqa: S506 - a safe loader


def load_compose(text: str, env: Mapping[str, str], *, path: str, tag: str, commit: str) -> ComposeFile:
    """Parse and interpolate a compose file the way `docker compose` would for one env map.

    Raises `InterpolationError` for a `${VAR:?}` whose variable is missing (compose refuses the
    whole file)."""
    raw = parse_compose_yaml(text)
    interp = Interpolator(env)
    configs: dict[str, str] = {}
    for name, cfg in (raw.get("configs") or {}).items():
        content = (cfg or {}).get("content")
        if content is not None:
            configs[name] = interp.text(str(content))
    services: dict[str, ServiceDef] = {}
    order: list[str] = []
    for name, svc_raw in (raw.get("services") or {}).items():
        svc = interp.value(copy.deepcopy(svc_raw))
        command = svc.get("command", "")
        command = " ".join(command) if isinstance(command, list) else str(command or "")
        sources = tuple(c["source"] if isinstance(c, dict) else str(c) for c in svc.get("configs", []) or [])
        profiles = tuple(svc.get("profiles") or ())
        services[name] = ServiceDef(
            name=name,
            container_name=str(svc.get("container_name") or f"work-{name}-1"),
            image=str(svc.get("image", "")),
            profiles=profiles,
            depends_on=_depends(svc.get("depends_on")),
            restart=str(svc.get("restart", "no")),
            stop_grace_s=parse_duration(svc.get("stop_grace_period"), default=10.0),
            environment=_env_dict(svc.get("environment")),
            command=command,
            labels=_labels_dict(svc.get("labels")),
            device_ids=_device_ids(svc),
            config_sources=sources,
            has_healthcheck="healthcheck" in svc,
            config_hash=config_hash(svc),
            ports=_ports(svc.get("ports")),
            content_hash=content_hash(svc, configs),
        )
        order.append(name)
    return ComposeFile(
        path=path,
        tag=tag,
        commit=commit,
        sha256=sha256_text(text),
        services=services,
        configs=configs,
        unset_variables=tuple(sorted(interp.unset)),
        order=tuple(order),
    )
