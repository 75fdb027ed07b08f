"""A model-proxy peer's registry view (`/backends/list`, `/backends/count`, `/registry`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from orchestrator_sim.apps.common import bearer_ok
from orchestrator_sim.faults import ActiveFaults
from orchestrator_sim.host.containers import BASE_DOMAIN, LONG_DOMAIN, MODEL_PROXY_PORT
from orchestrator_sim.host.sim_host import SimHost

# The rest of the fleet, as the peers see it (TEST-NET addresses). A simulated host's address is
# left out here: its own registrar decides whether it is listed.
OTHER_BACKENDS: dict[str, list[str]] = {
    BASE_DOMAIN: ["203.0.113.3:8444", "203.0.113.4:8444", "203.0.113.13:8444", "203.0.113.23:8444"],
    "deepseek-v3-2.completions.near.ai": ["203.0.113.41:8444", "203.0.113.42:8444"],
    "qwen3-coder.completions.near.ai": ["203.0.113.51:8444"],
}


def canonical_domain(value: str) -> str:
    text = value.strip().lower()
    host = urlparse(text).hostname if "://" in text else text.split("/", 1)[0]
    return (host or "").split(":", 1)[0].rstrip(".")


def registry(hosts: Sequence[SimHost], peer: str, faults: ActiveFaults) -> dict[str, list[dict[str, Any]]]:
    """Every domain's backends as `peer` lists them: the static rest of the fleet, then each
    simulated host under its own domain while its registrar keeps it registered (gpu02: the long
    domain, probed on :8001; a base host: the base domain, probed on :8000). `peer-missing`
    hides a host from peer-b; `host-unhealthy` shows a base host with healthy=false."""
    seen = hosts[0].wall().strftime("%Y-%m-%dT%H:%M:%SZ")
    simulated = {f"{h.host_ip}:{MODEL_PROXY_PORT}" for h in hosts}
    domains: dict[str, list[dict[str, Any]]] = {
        d: [{"address": a, "healthy": True, "last_seen": seen} for a in addrs if a not in simulated]
        for d, addrs in OTHER_BACKENDS.items()
    }
    for host in hosts:
        listed, healthy = host.registration()
        if not listed or (peer == "peer-b" and host.faults.active("peer-missing")):
            continue
        long = host.domain == LONG_DOMAIN
        domains.setdefault(host.domain, []).append(
            {
                "address": f"{host.host_ip}:{MODEL_PROXY_PORT}",
                "healthy": healthy,
                "probe_address": f"{host.host_ip}:{8001 if long else 8000}",
                "models": ["z-ai/glm-5.3-flash-long" if long else "z-ai/glm-5.3-flash"],
                "last_seen": seen,
            }
        )
    domains.setdefault(LONG_DOMAIN, [])
    return domains


def build_model_proxy_app(
    hosts: SimHost | Sequence[SimHost], peer: str, token: str, faults: ActiveFaults
) -> Starlette:
    if isinstance(hosts, SimHost):
        hosts = [hosts]
    host = hosts[0]

    def authorized(request: Request) -> bool:
        return bearer_ok(request, token)

    def domain_arg(request: Request) -> str | None:
        raw = request.query_params.get("domain")
        return canonical_domain(raw) if raw else None

    async def backends_list(request: Request) -> Response:
        if not authorized(request):
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        domain = domain_arg(request)
        if not domain:
            return JSONResponse({"error": "missing domain"}, status_code=400)
        backends = registry(hosts, peer, faults).get(domain, [])
        return JSONResponse({"domain": domain, "backends": backends, "peer": peer})

    async def backends_count(request: Request) -> Response:
        if not authorized(request):
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        domain = domain_arg(request)
        if not domain:
            return JSONResponse({"error": "missing domain"}, status_code=400)
        backends = registry(hosts, peer, faults).get(domain, [])
        return JSONResponse(
            {
                "domain": domain,
                "requested_domain": request.query_params["domain"],
                "healthy": sum(1 for b in backends if b["healthy"]),
                "total": len(backends),
            }
        )

    async def full_registry(request: Request) -> Response:
        if not authorized(request):
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        domains = registry(hosts, peer, faults)
        every = [b for bs in domains.values() for b in bs]
        return JSONResponse(
            {
                "domains": domains,
                "total_backends": len(every),
                "healthy_backends": sum(1 for b in every if b["healthy"]),
                "generated_at": host.wall().strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        )

    return Starlette(
        routes=[
            Route("/backends/list", backends_list, methods=["GET"]),
            Route("/backends/count", backends_count, methods=["GET"]),
            Route("/registry", full_registry, methods=["GET"]),
        ]
    )
