"""Client for one model-proxy peer (the router behind `*.completions.near.ai`; interfaces.md section 3).
The runbooks read both peers and require them to agree.

ASSUMED SHAPE: `GET /backends/list?domain=<domain>` is not publicly documented; its one parser
`parse_backends_list` reads `ASSUMED_BACKENDS_LIST_SHAPE`, ignores extra fields, and refuses (naming
the assumption) an answer it cannot read rather than guessing health.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog

from orchestrator.hosts.clients.errors import MalformedResponse, RequestInvalid
from orchestrator.hosts.clients.http_session import HttpSession

log = structlog.get_logger(__name__)

ASSUMED_BACKENDS_LIST_SHAPE = '{"domain": "<domain>", "backends": [{"address": "ip:port", "healthy": true, ...}]}'


@dataclass(frozen=True)
class Backend:
    address: str
    healthy: bool

    @property
    def host(self) -> str:
        return split_host(self.address)


@dataclass(frozen=True)
class Presence:
    """Whether a peer lists an address under a domain, and a healthy match among what it lists."""

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
    def bad(what: str) -> MalformedResponse:
        return MalformedResponse(system, f"/backends/list {what} (assumed shape {ASSUMED_BACKENDS_LIST_SHAPE})")

    if not isinstance(payload, dict) or not isinstance(payload.get("backends"), list):
        raise MalformedResponse(system, f"/backends/list answer does not have the assumed shape {ASSUMED_BACKENDS_LIST_SHAPE}")
    backends: list[Backend] = []
    for index, item in enumerate(payload["backends"]):
        if not isinstance(item, dict):
            raise bad(f"backend {index} is not an object")
        address = item.get("address")
        healthy = item.get("healthy")
        if not isinstance(address, str) or not address:
            raise bad(f"backend {index} has no 'address'")
        if not isinstance(healthy, bool):
            raise bad(f"backend {address} has no boolean 'healthy'")
        backends.append(Backend(address=address, healthy=healthy))
    return backends


class ModelProxyClient(HttpSession):
    timeout_s = 15

    def __init__(self, name: str, base_url: str, token: Any = None, **session: Any) -> None:
        self.name = name
        self.system = f"model-proxy:{name}"
        super().__init__(base_url, token, **session)

    def __repr__(self) -> str:
        return f"ModelProxyClient({self.name!r}, {self.base_url!r})"

    async def presence(self, address: str, domain: str) -> Presence:
        """Is `address` (`ip:port`, or a bare host matching backends' host part) listed under
        `domain` on this peer, and is one of its matches healthy?"""
        if not isinstance(address, str) or not address.strip():
            raise RequestInvalid("model-proxy", "address: must be ip:port or a host", field="address")
        if not isinstance(domain, str) or not domain.strip() or any(c.isspace() for c in domain):
            raise RequestInvalid("model-proxy", "domain: must be a non-empty host name", field="domain")
        backends = parse_backends_list(await self._read_json("GET", "/backends/list", params={"domain": domain}), self.system)
        log.info(
            "model_proxy.backends",
            **self.redactor.scrub_obj(dict(peer=self.name, domain=domain, total=len(backends), healthy=sum(b.healthy for b in backends))),
        )
        if split_host(address) == address:  # a bare host: compare host parts
            matches = [b for b in backends if b.host == address]
        else:
            matches = [b for b in backends if b.address == address]
        return Presence(listed=bool(matches), healthy=any(b.healthy for b in matches))
