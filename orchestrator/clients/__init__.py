"""HTTP clients for the systems the orchestrator talks to (interfaces.md).

- `compose_manager.ComposeManagerClient`: compose/up, compose/down (NDJSON streams), logs, docker/ps,
  version, the action log.
- `dashboard.DashboardClient`: instances and their full env maps.
- `model_proxy.ModelProxyClient`: one model-proxy peer's registry and backends.
- `inference.InferenceClient`, `inference.SoakRelayClient`: completions and direct replica checks.
- `errors`: the error taxonomy; `retry.RetryPolicy`: how reads and busy answers are retried.
"""

from orchestrator.clients.compose_manager import ComposeManagerClient, ComposeRequest, StreamOutcome
from orchestrator.clients.dashboard import DashboardClient, Instance
from orchestrator.clients.errors import (
    BadRequest,
    Busy,
    ClientError,
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
from orchestrator.clients.inference import (
    CacheHitResult,
    Completion,
    InferenceClient,
    RelayCheckResult,
    SoakRelayClient,
)
from orchestrator.clients.model_proxy import Backend, BackendCount, ModelProxyClient, Presence, Registry
from orchestrator.clients.retry import RetryPolicy

__all__ = [
    "Backend",
    "BackendCount",
    "BadRequest",
    "Busy",
    "CacheHitResult",
    "ClientError",
    "Completion",
    "ComposeManagerClient",
    "ComposeRequest",
    "DashboardClient",
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
    "TagNotFound",
    "TagTooRecent",
    "TransportError",
    "Unauthorized",
]
