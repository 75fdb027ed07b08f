"""What a simulated fleet is made of before anything runs: its configuration (`SimConfig`), the
URLs and tokens it hands out (`FleetUrls`, `FleetTokens`), the hosts it knows and their addresses,
and every host's env map as the dashboard holds it (random secrets, drawn in a fixed order)."""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from orchestrator_sim.compose_manager.repo import BASE_HOSTS
from orchestrator_sim.faults import ActiveFaults
from orchestrator_sim.host.containers import COMPOSE_VERSION, HOST_IP

LOOPBACK = "127.0.0.1"
PEERS = ("peer-a", "peer-b")
RELAY_PORTS = (8008, 8009, 8010)  # 8010: the #302 relay's DCGM route
# The base-tier hosts' addresses (TEST-NET, as the peers' static list had them).
BASE_HOST_IPS = {"gpu03": "203.0.113.3", "gpu04": "203.0.113.4", "gpu23": "203.0.113.23"}
KNOWN_HOSTS = ("gpu02", *BASE_HOSTS)
#: Every engine (every container) keeps only its last N log lines, as docker's log rotation
#: (`max-size`/`max-file`) does on production hosts: `SimConfig.log_lines`'s default.
LOG_LINES_ENV = "ORCHESTRATOR_SIM_LOG_LINES"


def log_lines_from_env() -> int | None:
    """ORCHESTRATOR_SIM_LOG_LINES as a positive line count (unset or empty: no rotation)."""
    raw = os.environ.get(LOG_LINES_ENV, "").strip()
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{LOG_LINES_ENV} must be a positive number of log lines, not {raw!r}")
    return n


@dataclass(frozen=True)
class SimConfig:
    speed: float = 600
    cold_start_s: float = 3000
    faults: Sequence[str] = ()
    seed: int | None = None
    available_ram_gib: float = 1223
    restart_delay_s: float = 30.0  # docker's restart back-off, in simulation seconds
    discovery_cycle_s: float = 90.0  # a new registrar is listed this long after it starts
    start_time: datetime | None = None  # simulated wall time at t=0 (default: now, UTC)
    fresh_host: bool = False  # nothing deployed yet (as the recorded 8e07c35 exchanges start)
    hosts: Sequence[str] = ("gpu02",)  # any of gpu02, gpu03, gpu04, gpu23 (at least one)
    # docker compose's release on every host (docker ps shows it as com.docker.compose.version).
    # Its rules decide whether a change of inline `configs:` content alone recreates a service:
    # from 2.23.1 on it does not (docker/compose#11900, open). `inline_configs_ignored` overrides
    # that rule (False: the old assumption that such a change recreates, for comparison tests).
    compose_version: str = COMPOSE_VERSION
    inline_configs_ignored: bool | None = None
    # docker's log rotation: every container keeps only its last N lines (None: all, up to
    # host/core.LOG_CAP); a long-running engine's start and ready line are then long gone.
    # Default: ORCHESTRATOR_SIM_LOG_LINES.
    log_lines: int | None = field(default_factory=log_lines_from_env)
    #: gpu02's starting point: "canary" (the canary file, before #294) or "long-context" (after it)
    initial: str = "canary"


@dataclass(frozen=True)
class FleetUrls:
    compose_manager: str
    dashboard: str
    peers: dict[str, str]
    inference: str
    relay: dict[int, str]
    github: str = ""  # the simulated GitHub REST API (ORCHESTRATOR_GITHUB_API_URL)
    registry: str = ""  # issue 23: the compose-hash registry (a read-only HTTP/JSON gate's URL)
    proxy: str = ""  # issue 23: the host's own inference proxy (its /backends/list), port 8000
    prometheus: str = ""  # issue 23: a Prometheus-compatible query API over the host's engines


@dataclass(frozen=True)
class FleetTokens:
    compose_manager: str
    dashboard: str
    model_proxy: str
    inference: str


def _secret(rng: random.Random, n: int = 32, alphabet: str = "0123456789abcdef") -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))
def _env_map(name: str, ip: str, rng: random.Random, *, long_tier_only: bool) -> dict[str, str]:
    """A host's full env map as the dashboard holds it (secrets are random per run, drawn in this
    order: a fleet's env maps do not depend on which other hosts it simulates)."""
    alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    env = {"HOST_IP": ip, "CVM_HOST": f"h200-{name}", "CVM_NAME": name, "DD_HOSTNAME": name, "ENV": "prod"}
    if long_tier_only:
        env["LONG_TIER_ONLY"] = "true"
    env.update({
        "PROXY_TOKEN": _secret(rng, 48, alnum),
        "MODEL_PROXY_TOKEN": _secret(rng, 48, alnum),
        "HUGGING_FACE_HUB_TOKEN": "hf_" + _secret(rng, 34, alnum),
        "MONITORING_INGEST_TOKEN": _secret(rng, 40, alnum),
        "CLOUD_API_USAGE_TOKEN": _secret(rng, 48, alnum),
        "FUSION_ENABLED": "false",
        "FUSION_INTERNAL_BEARER_TOKEN": _secret(rng, 40, alnum),
        "WEB_CONTEXT_SEARCH_URL": "https://web-context.near.ai/v1/search",
        "WEB_CONTEXT_SEARCH_API_KEY": _secret(rng, 40, alnum),
    })
    return env


def gpu02_env_map(rng: random.Random, faults: ActiveFaults) -> dict[str, str]:
    """gpu02's full env map as the dashboard holds it (its registrar registers the long domain)."""
    env = _env_map("gpu02", HOST_IP, rng, long_tier_only=True)
    if faults.active("budget-80pct"):
        env["GLM53_HICACHE_RAM_BUDGET"] = "80%"
    if faults.active("budget-no-fit"):
        env["GLM53_HICACHE_RAM_BUDGET"] = "650GiB"
    return env


def base_env_map(name: str, rng: random.Random) -> dict[str, str]:
    """A base host's full env map: no LONG_TIER_ONLY (its registrar registers the base domain)."""
    return _env_map(name, BASE_HOST_IPS[name], rng, long_tier_only=False)
