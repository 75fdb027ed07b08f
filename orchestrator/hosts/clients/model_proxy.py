"""Client for one model-proxy peer (the router behind `*.completions.near.ai`; interfaces.md section 3).

The runbooks read both peers and require them to agree: make one client per peer (`name` says
which) and compare their answers.

ASSUMED SHAPE: `GET /backends/list?domain=<domain>` is not publicly documented. We assume
`{"domain": "<domain>", "backends": [{"address": "ip:port", "healthy": true, ...}]}`. Its parser is
`parse_backends_list` below and nowhere else; it ignores extra fields, and refuses (with a message
naming the assumption) an answer it cannot read rather than guessing health.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
import structlog

from orchestrator.hosts.clients.errors import (
    MalformedResponse,
    RequestInvalid,
)
from orchestrator.hosts.clients.http_session import HttpSession
from orchestrator.hosts.clients.retry import RetryPolicy
from orchestrator.hosts.redaction import Redactor, reveal
from orchestrator.util.clock import Clock

log = structlog.get_logger(__name__)

ASSUMED_BACKENDS_LIST_SHAPE = '{"domain": "<domain>", "backends": [{"address": "ip:port", "healthy": true, ...}]}'


@dataclass(frozen=True)
class Backend:
    address: str
    healthy: bool
    extra: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def host(self) -> str:
        return split_host(self.address)


@dataclass(frozen=True)
class BackendCount:
    domain: str
    requested_domain: str
    healthy: int
    total: int


@dataclass(frozen=True)
class Registry:
    domains: dict[str, list[dict[str, Any]]]
    total_backends: int
    healthy_backends: int

    def addresses(self, domain: str) -> list[str]:
        return [str(b.get("address")) for b in self.domains.get(domain, []) if isinstance(b, dict)]


@dataclass(frozen=True)
class Presence:
    peer: str
    domain: str
    address: str
    listed: bool
    healthy: bool


def split_host(address: str) -> str:
    """`10.0.0.2:8001` -> `10.0.0.2`; `[::1]:80` -> `::1`; an address without a port is returned as is."""
    if address.startswith("["):
        return address[1:].split("]", 1)[0]
    if address.count(":") == 1:
        return address.split(":", 1)[0]
    return address


def parse_backends_list(payload: Any, system: str = "model-proxy") -> list[Backend]:
    """The ONE parser of the assumed /backends/list shape (see module doc)."""
    if not isinstance(payload, dict) or not isinstance(payload.get("backends"), list):
        raise MalformedResponse(system, f"/backends/list answer does not have the assumed shape {ASSUMED_BACKENDS_LIST_SHAPE}")
    backends: list[Backend] = []
    for index, item in enumerate(payload["backends"]):
        if not isinstance(item, dict):
            raise MalformedResponse(system, f"/backends/list backend {index} is not an object (assumed shape {ASSUMED_BACKENDS_LIST_SHAPE})")
        address = item.get("address")
        healthy = item.get("healthy")
        if not isinstance(address, str) or not address:
            raise MalformedResponse(system, f"/backends/list backend {index} has no 'address' (assumed shape {ASSUMED_BACKENDS_LIST_SHAPE})")
        if not isinstance(healthy, bool):
            raise MalformedResponse(
                system, f"/backends/list backend {address} has no boolean 'healthy' (assumed shape {ASSUMED_BACKENDS_LIST_SHAPE})"
            )
        extra = {k: v for k, v in item.items() if k not in ("address", "healthy")}
        backends.append(Backend(address=address, healthy=healthy, extra=extra))
    return backends


def _int(payload: dict[str, Any], key: str, system: str, route: str) -> int:
    value = payload.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise MalformedResponse(system, f"{route} answer has no integer {key!r}")
    return value


class ModelProxyClient(HttpSession):
    def __init__(
        self,
        name: str,
        base_url: str,
        token: Any = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        retry: RetryPolicy | None = None,
        timeout_s: float = 15,
        redactor: Redactor | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.name = name
        self.system = f"model-proxy:{name}"
        self._open_session(base_url, reveal(token), transport=transport, timeout_s=timeout_s, redactor=redactor,
                           retry=retry, clock=clock)

    def __repr__(self) -> str:
        return f"ModelProxyClient({self.name!r}, {self.base_url!r})"

    async def _get(self, route: str, params: dict[str, str] | None = None) -> Any:
        return await self._read_json(self.system, "GET", route, what=f"{self.system} {route}", params=params)

    @staticmethod
    def _check_domain(domain: str) -> None:
        if not isinstance(domain, str) or not domain.strip() or any(c.isspace() for c in domain):
            raise RequestInvalid("model-proxy", "domain: must be a non-empty host name", field="domain")

    async def backends_list(self, domain: str) -> list[Backend]:
        self._check_domain(domain)
        backends = parse_backends_list(await self._get("/backends/list", {"domain": domain}), self.system)
        log.info(
            "model_proxy.backends",
            **self.redactor.scrub_obj(dict(peer=self.name, domain=domain, total=len(backends), healthy=sum(b.healthy for b in backends))),
        )
        return backends

    async def backends_count(self, domain: str) -> BackendCount:
        self._check_domain(domain)
        payload = await self._get("/backends/count", {"domain": domain})
        if not isinstance(payload, dict):
            raise MalformedResponse(self.system, "/backends/count answer is not an object")
        return BackendCount(
            domain=str(payload.get("domain", domain)),
            requested_domain=str(payload.get("requested_domain", domain)),
            healthy=_int(payload, "healthy", self.system, "/backends/count"),
            total=_int(payload, "total", self.system, "/backends/count"),
        )

    async def registry(self) -> Registry:
        payload = await self._get("/registry")
        if not isinstance(payload, dict) or not isinstance(payload.get("domains"), dict):
            raise MalformedResponse(self.system, "/registry answer has no 'domains' object")
        domains: dict[str, list[dict[str, Any]]] = {}
        for domain, entries in payload["domains"].items():
            if not isinstance(entries, list):
                raise MalformedResponse(self.system, f"/registry domain {domain!r} is not a list")
            domains[str(domain)] = [e if isinstance(e, dict) else {"address": e} for e in entries]
        return Registry(
            domains=domains,
            total_backends=_int(payload, "total_backends", self.system, "/registry"),
            healthy_backends=_int(payload, "healthy_backends", self.system, "/registry"),
        )

    async def presence(self, address: str, domain: str) -> Presence:
        """Is `address` listed (and healthy) under `domain` on this peer?

        `address` is `ip:port` (matched exactly) or a bare host (matched against each backend's
        host part). Healthy means at least one matching backend is healthy.
        """
        if not isinstance(address, str) or not address.strip():
            raise RequestInvalid("model-proxy", "address: must be ip:port or a host", field="address")
        backends = await self.backends_list(domain)
        if split_host(address) == address:  # a bare host: compare host parts
            matches = [b for b in backends if b.host == address]
        else:
            matches = [b for b in backends if b.address == address]
        return Presence(
            peer=self.name,
            domain=domain,
            address=address,
            listed=bool(matches),
            healthy=any(b.healthy for b in matches),
        )
