"""The clients one run uses to talk to one host, built from settings and the inventory
(`transport`: None in production, a respx or ASGI transport in tests)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from orchestrator.hosts.clients.compose_manager import ComposeManagerClient
from orchestrator.hosts.clients.dashboard import DashboardClient
from orchestrator.hosts.clients.github import GitHubClient
from orchestrator.hosts.clients.http_json import ExternalReads
from orchestrator.hosts.clients.inference import InferenceClient, SoakRelayClient
from orchestrator.hosts.clients.model_proxy import ModelProxyClient
from orchestrator.hosts.clients.prometheus import PrometheusQueryClient
from orchestrator.hosts.clients.retry import RetryPolicy
from orchestrator.hosts.inventory import HostEntry, Inventory
from orchestrator.hosts.redaction import Redactor
from orchestrator.util.clock import Clock
from orchestrator.util.settings import Settings


@dataclass
class HostClients:
    compose: ComposeManagerClient
    dashboard: DashboardClient
    peers: list[ModelProxyClient]
    inference: InferenceClient
    #: the run's, shared by the relay clients made later
    redactor: Redactor
    #: for the orchestrator's own tag check (merged, old enough)
    github: GitHubClient | None = None
    #: every inventory host -> its model-proxy address (the capacity guard reads the other hosts')
    addresses: dict[str, str] = field(default_factory=dict)
    #: every inventory host -> its dashboard instance name (an `env:` gate on another host)
    instance_names: dict[str, str] = field(default_factory=dict)
    external: ExternalReads | None = None
    #: for the clients made later (the Prometheus query API per step)
    transport: httpx.AsyncBaseTransport | None = None
    _opened: list = field(default_factory=list)

    def relay(self, url: str, token: str) -> SoakRelayClient:
        client = SoakRelayClient(url, token, transport=self.transport, redactor=self.redactor)
        self._opened.append(client)
        return client

    def prometheus(self, url: str) -> PrometheusQueryClient:
        """A client of the query API at `url`, closed by its caller (one per step)."""
        return PrometheusQueryClient(url, transport=self.transport)

    async def aclose(self) -> None:
        for c in [self.compose, self.dashboard, self.inference, *self.peers, *self._opened, *([self.github] if self.github else [])]:
            await c.aclose()


def build_host_clients(settings: Settings, inventory: Inventory, entry: HostEntry, redactor: Redactor, *,
                       transport: httpx.AsyncBaseTransport | None = None, retry: RetryPolicy | None = None,
                       clock: Clock | None = None) -> HostClients:
    common: dict[str, Any] = dict(transport=transport, retry=retry, clock=clock)

    github = GitHubClient(settings.github_api_url, settings.github_token, redactor=redactor, **common)
    return HostClients(
        compose=ComposeManagerClient(str(entry.compose_manager_url), settings.compose_manager_token, redactor=redactor, **common),
        dashboard=DashboardClient(str(inventory.dashboard_url), settings.dashboard_token, **common),
        peers=[ModelProxyClient(name, str(url), settings.model_proxy_token, **common)
               for name, url in inventory.model_proxy_peers.items()],
        inference=InferenceClient(str(entry.inference_endpoint), settings.inference_token, transport=transport, redactor=redactor),
        redactor=redactor,
        github=github,
        addresses={name: h.model_proxy_address for name, h in inventory.hosts.items()},
        instance_names={name: h.instance_name for name, h in inventory.hosts.items()},
        external=ExternalReads(redactor, github, transport),
        transport=transport,
    )
