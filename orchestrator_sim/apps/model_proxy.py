"""A model-proxy peer's registry view (`/backends/list`, `/backends/count`, `/registry`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from orchestrator_sim.apps.common import bearer_ok
from orchestrator_sim.containers import BASE_DOMAIN, HOST_IP, LONG_DOMAIN, MODEL_PROXY_PORT
from orchestrator_sim.faults import ActiveFaults
from orchestrator_sim.host import SimHost

# The rest of the fleet, as the peers see it (TEST-NET addresses).
OTHER_BACKENDS: dict[str, list[str]] = {
    BASE_DOMAIN: ["203.0.113.3:8444", "203.0.113.4:8444", "203.0.113.13:8444", "203.0.113.23:8444"],
    "deepseek-v3-2.completions.near.ai": ["203.0.113.41:8444", "203.0.113.42:8444"],
    "qwen3-coder.completions.near.ai": ["203.0.113.51:8444"],
}
GPU02_ADDRESS = f"{HOST_IP}:{MODEL_PROXY_PORT}"


def canonical_domain(value: str) -> str:
    text = value.strip().lower()
    host = urlparse(text).hostname if "://" in text else text.split("/", 1)[0]
    return (host or "").split(":", 1)[0].rstrip(".")


def registry(host: SimHost, peer: str, faults: ActiveFaults) -> dict[str, list[dict[str, Any]]]:
    seen = host.wall().strftime("%Y-%m-%dT%H:%M:%SZ")
    domains: dict[str, list[dict[str, Any]]] = {
        d: [{"address": a, "healthy": True, "last_seen": seen} for a in addrs] for d, addrs in OTHER_BACKENDS.items()
    }
    listed, healthy = host.registration()
    if listed and not (peer == "peer-b" and faults.active("peer-missing")):
        domains.setdefault(LONG_DOMAIN, []).append(
            {
                "address": GPU02_ADDRESS,
                "healthy": healthy,
                "probe_address": f"{HOST_IP}:8001",
                "models": ["z-ai/glm-5.3-flash-long"],
                "last_seen": seen,
            }
        )
    domains.setdefault(LONG_DOMAIN, [])
    return domains


def build_model_proxy_app(host: SimHost, peer: str, token: str, faults: ActiveFaults) -> Starlette:
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
        backends = registry(host, peer, faults).get(domain, [])
        return JSONResponse({"domain": domain, "backends": backends, "peer": peer})

    async def backends_count(request: Request) -> Response:
        if not authorized(request):
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        domain = domain_arg(request)
        if not domain:
            return JSONResponse({"error": "missing domain"}, status_code=400)
        backends = registry(host, peer, faults).get(domain, [])
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
        domains = registry(host, peer, faults)
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
