"""The simulated host's state: its containers (and, for engines, what runs inside them), and the
constants of gpu02 the simulator uses."""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator_sim.host import live_traffic
from orchestrator_sim.host.engine_cache import EngineCounters, PrefixCache

PROJECT = "work"
HOST_IP = "203.0.113.2"
MODEL_PROXY_PORT = 8444
LONG_DOMAIN = "glm-5-3-flash-long.completions.near.ai"
BASE_DOMAIN = "glm-5-3-flash.completions.near.ai"
SERVED_MODEL = "z-ai/glm-5.3-flash"
COMPOSE_VERSION = "2.39.1"
CONFIG_DIR = "/app/work"  # compose-manager's work dir (labels: project.config_files=/app/work/prod/X.yaml)


@dataclass
class EngineRun:
    slot: str | None
    hicache: bool
    fault: str | None
    ready: bool = False
    booked_bytes: int = 0
    cache: PrefixCache = field(default_factory=lambda: PrefixCache(hicache=False))
    counters: EngineCounters = field(default_factory=EngineCounters)
    #: live traffic (live_traffic.py): sim time it became ready, seconds served so far, last accrual
    ready_at: float | None = None
    live_s: float = 0.0
    live_at: float | None = None
    #: its live histograms as accrued up to `live_s` (live_traffic.accrue)
    live_hist: live_traffic.Accrued = field(default_factory=lambda: live_traffic.Accrued())


@dataclass
class Container:
    id: str
    name: str
    service: str
    project: str
    image: str
    config_hash: str
    tag: str  # our note: which tag and file created it (never shown in docker ps)
    file: str
    created_at: float
    labels: dict[str, str]
    env: dict[str, str]
    command: str
    restart_policy: str
    kind: str  # engine | oneshot | relay | service
    has_healthcheck: bool
    gpus: tuple[str, ...] = ()  # device_ids reserved by the service (nvidia)
    ports: tuple[tuple[int, int], ...] = ()  # published (host, container) ports, from the file
    relay_routes: dict[int, str] = field(default_factory=dict)
    content_hash: str = ""  # the inline configs' content the container was created with (never shown)
    relay_token: str | None = None
    proxy_pool: list[str] = field(default_factory=list)
    state: str = "created"
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int = 0
    stopping: bool = False
    user_stopped: bool = False
    run: int = 0
    restart_count: int = 0
    log: list[str] = field(default_factory=list)
    engine: EngineRun | None = None

    @property
    def slot(self) -> str | None:
        return self.engine.slot if self.engine else None

    @property
    def ready(self) -> bool:
        return bool(self.engine and self.engine.ready)

    @property
    def up(self) -> bool:
        return self.state == "running" and not self.stopping


@dataclass(frozen=True)
class ContainerView:
    """A snapshot of a container for inspection."""

    id: str
    name: str
    service: str
    project: str
    image: str
    state: str
    status: str
    created_at: float
    started_at: float | None
    finished_at: float | None
    exit_code: int
    restart_count: int
    tag: str
    file: str
    config_hash: str
    slot: str | None
    ready: bool
    stopping: bool
    booked_bytes: int
