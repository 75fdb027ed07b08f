"""compose-manager as interfaces.md §1 describes it, in front of the simulated host."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from orchestrator_sim.apps.common import bearer_ok, json_body, recorded_call
from orchestrator_sim.compose_ops import ComposeError, Operation
from orchestrator_sim.compose_repo import parse_compose_yaml
from orchestrator_sim.containers import PROJECT
from orchestrator_sim.faults import ActiveFaults
from orchestrator_sim.host import SimHost
from orchestrator_sim.recording import CallRecorder
from orchestrator_sim.serving import nginx_error_page

STREAM_POLL_S = 0.005  # real seconds between looks at an operation's output
_NONCE = re.compile(r"^[0-9a-fA-F]{64}$")


class StreamCut(Exception):
    """Raised inside a compose stream to break the connection before its `done` line."""


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"status": "error", "error": message}, status_code=status)


async def ndjson(host: SimHost, op: Operation) -> AsyncIterator[bytes]:
    sent = 0
    while True:
        lines, done, cut = host.op_snapshot(op, sent)
        for event, data in lines:
            yield (json.dumps({"event": event, "data": data}, ensure_ascii=False) + "\n").encode()
        sent += len(lines)
        if cut:
            raise StreamCut(f"{op.action} stream cut by a simulated fault")
        if done:
            yield (json.dumps({"event": "done", "success": op.success, "exit_code": op.exit_code}) + "\n").encode()
            return
        await asyncio.sleep(STREAM_POLL_S)


def build_compose_manager_app(host: SimHost, token: str, faults: ActiveFaults, recorder: CallRecorder) -> Starlette:
    Endpoint = Callable[[Request], Awaitable[Response]]

    def route(auth: bool = True) -> Callable[[Endpoint], Endpoint]:
        def wrap(fn: Endpoint) -> Endpoint:
            async def endpoint(request: Request) -> Response:
                if faults.take("server-500"):
                    call = recorded_call(request)
                    if call is not None:
                        recorder.update(call, outcome="fault:server-500")
                    return HTMLResponse(nginx_error_page(500, "Internal Server Error"), status_code=500)
                if auth and not bearer_ok(request, token):
                    return error(401, "unauthorized")
                return await fn(request)

            return endpoint

        return wrap

    @route(auth=False)
    async def version(request: Request) -> Response:
        return JSONResponse(host.version())

    async def _compose(request: Request, down: bool) -> Response:
        body = await json_body(request)
        call = recorded_call(request)
        try:
            op = host.begin_down(body, call) if down else host.begin_up(body, call)
        except ComposeError as exc:
            return error(exc.status, exc.message)
        return StreamingResponse(ndjson(host, op), media_type="application/x-ndjson")

    @route()
    async def compose_up(request: Request) -> Response:
        return await _compose(request, down=False)

    @route()
    async def compose_down(request: Request) -> Response:
        return await _compose(request, down=True)

    @route()
    async def compose_logs(request: Request) -> Response:
        body = await json_body(request) or {}
        if not isinstance(body, dict):
            return error(400, "invalid request body: expected a JSON object")
        services = body.get("services") or []
        if not isinstance(services, list) or not all(isinstance(s, str) for s in services):
            return error(400, "services must be a list of service names")
        tail = body.get("tail", 100)
        if not isinstance(tail, int) or isinstance(tail, bool) or tail < 0:
            return error(400, "tail must be a non-negative integer")
        file = body.get("file")
        project = body.get("project") or PROJECT
        if file is not None:
            defined = _defined_services(host, file)
            if defined is None:
                return error(400, f"file not found: {file}")
            for s in services:
                if s not in defined:
                    return error(400, f"no such service: {s}")
            if not services:
                services = sorted(defined)
        return JSONResponse({"status": "ok", "output": host.compose_logs(services, tail, project=project)})

    @route()
    async def docker_ps(request: Request) -> Response:
        project, services = None, None
        if request.method == "POST":
            body = await json_body(request) or {}
            if isinstance(body, dict):
                project = body.get("project") or None
                services = body.get("services") or None
        return JSONResponse({"status": "ok", "output": "\n".join(host.ps_lines(project, services))})

    @route()
    async def attestation(request: Request) -> Response:
        nonce = request.query_params.get("nonce", "")
        if not _NONCE.match(nonce):
            return error(400, "nonce must be 64 hex characters")
        return JSONResponse(host.attestation(nonce))

    return Starlette(
        routes=[
            Route("/version", version, methods=["GET"]),
            Route("/compose/up", compose_up, methods=["POST"]),
            Route("/compose/down", compose_down, methods=["POST"]),
            Route("/compose/logs", compose_logs, methods=["POST"]),
            Route("/docker/ps", docker_ps, methods=["GET", "POST"]),
            Route("/v1/attestation/report", attestation, methods=["GET"]),
        ]
    )


def _defined_services(host: SimHost, file: str) -> set[str] | None:
    """The services a file of the repository defines (at any tag), or None if no tag holds it."""
    if file not in host.repo.known_files():
        return None
    return set(parse_compose_yaml((host.repo.compose_dir / file).read_text()).get("services") or {})
