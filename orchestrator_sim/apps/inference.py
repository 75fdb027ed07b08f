"""The long-domain inference endpoint (model-proxy -> gpu02's nginx -> proxy-glm53 -> an engine)
and the soak relay's per-replica listeners."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from orchestrator_sim.apps.common import add_effect, bearer_ok, json_body
from orchestrator_sim.host.containers import SERVED_MODEL
from orchestrator_sim.host.sim_host import SimHost
from orchestrator_sim.record.calls import CallRecorder

_ALL_METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]


def build_inference_app(host: SimHost, token: str, recorder: CallRecorder) -> Starlette:
    async def chat(request: Request) -> Response:
        if not bearer_ok(request, token):
            return JSONResponse(
                {"error": {"message": "invalid api key", "type": "authentication_error", "code": 401}}, status_code=401
            )
        status, body, engine = host.inference_chat(await json_body(request))
        if engine:
            add_effect(recorder, request, f"served-by:{engine}")
        return JSONResponse(body, status_code=status)

    async def models(request: Request) -> Response:
        if not bearer_ok(request, token):
            return JSONResponse(
                {"error": {"message": "invalid api key", "type": "authentication_error", "code": 401}}, status_code=401
            )
        listed, healthy = host.registration()
        if not (listed and healthy):
            return JSONResponse({"error": {"message": "no healthy backend", "code": 503}}, status_code=503)
        return JSONResponse({"object": "list", "data": [{"id": SERVED_MODEL, "object": "model", "owned_by": "nearai"}]})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
        ]
    )


def build_relay_app(host: SimHost, port: int, recorder: CallRecorder) -> Starlette:
    """The soak relay's `port` (8008 or 8009) as nginx serves it: routes per the relay's file."""

    async def relay(request: Request) -> Response:
        body = await json_body(request) if request.method == "POST" else None
        status, out, media, engine = host.relay_request(
            port, request.method, request.url.path, request.headers.get("authorization"), body
        )
        if engine:
            add_effect(recorder, request, f"served-by:{engine}")
        if isinstance(out, dict):
            return JSONResponse(out, status_code=status)
        if media == "text/html":
            return Response(out, status_code=status, media_type="text/html")
        return PlainTextResponse(out, status_code=status, media_type=media)

    return Starlette(routes=[Route("/{path:path}", relay, methods=_ALL_METHODS)])


def build_host_proxy_app(host: SimHost) -> Starlette:
    """The host's own inference proxy (proxy-glm53) on its port: `GET /backends/list` (issue 23)."""

    async def backends(request: Request) -> Response:
        status, body = host.proxy_backends(request.headers.get("authorization"))
        return JSONResponse(body, status_code=status)

    return Starlette(routes=[Route("/backends/list", backends, methods=["GET"])])
