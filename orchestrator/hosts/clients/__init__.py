"""HTTP clients for the systems the orchestrator talks to (interfaces.md).

- `compose_manager.ComposeManagerClient`: compose/up, compose/down (NDJSON streams), logs, docker/ps,
  version, status, host/gpu, host/cache, the action log (compose-manager 8e07c35).
- `github.GitHubClient`: tag checks (exists, merged to main, old enough).
- `dashboard.DashboardClient`: instances and their full env maps.
- `model_proxy.ModelProxyClient`: one model-proxy peer's registry and backends.
- `inference.InferenceClient`, `inference.SoakRelayClient`: completions and direct replica checks.
- `errors`: the error taxonomy; `retry.RetryPolicy`: how reads and busy answers are retried.
"""

from orchestrator.hosts.clients.compose_manager import ComposeManagerClient, ComposeRequest, StreamOutcome
from orchestrator.hosts.clients.dashboard import DashboardClient, Instance
from orchestrator.hosts.clients.errors import (
    BadRequest,
    Busy,
    ClientError,
    ComposeFailed,
    HostListedTwice,
    HostNotFound,
    MalformedResponse,
    RequestInvalid,
    ServerError,
    TagNotFound,
    TagTooRecent,
    TransportError,
    Unauthorized,
)
from orchestrator.hosts.clients.github import GitHubClient, GitHubUnreachable, TagCheck
from orchestrator.hosts.clients.inference import (
    CacheHitResult,
    Completion,
    InferenceClient,
    RelayCheckResult,
    SoakRelayClient,
)
from orchestrator.hosts.clients.model_proxy import Backend, BackendCount, ModelProxyClient, Presence, Registry
from orchestrator.hosts.clients.retry import RetryPolicy

__all__ = [
    "Backend",
    "BackendCount",
    "BadRequest",
    "Busy",
    "CacheHitResult",
    "ClientError",
    "Completion",
    "ComposeFailed",
    "ComposeManagerClient",
    "ComposeRequest",
    "DashboardClient",
    "GitHubClient",
    "GitHubUnreachable",
    "HostListedTwice",
    "HostNotFound",
    "InferenceClient",
    "Instance",
    "MalformedResponse",
    "ModelProxyClient",
    "Presence",
    "Registry",
    "RelayCheckResult",
    "RequestInvalid",
    "RetryPolicy",
    "ServerError",
    "SoakRelayClient",
    "StreamOutcome",
    "TagCheck",
    "TagNotFound",
    "TagTooRecent",
    "TransportError",
    "Unauthorized",
]
