"""compose-manager's HTTP surface as deployed on the fleet: commit 8e07c35 (tag
prod-20260702-8e07c35), in front of the simulated host.

This module is the whole HTTP surface of the simulated compose-manager; `ops.py` holds
what happens behind it. Every shape and text here follows `compose-manager-as-deployed.md` and the
recorded exchanges (`samples/compose-manager-8e07c35/exchanges.jsonl`); the contract tests
(tests/contract/) replay those recordings against this app and compare status and body shape.

- Auth: `Authorization: Bearer <token>` on every route but `GET /version` and
  `GET /v1/attestation/report`. 401 bodies: `Missing or invalid Authorization header` (no or
  malformed header) and `Invalid token` (wrong token).
- `GET /docker/ps` only (`POST` is 405 with an empty body): running containers of every project.
- `POST /compose/up|down`: NDJSON stream; body-shape errors are 422 text/plain; then the lock,
  then validation (ops.py); a dry run sends a `plan` event before `done`.
- `POST /compose/logs`: no `project` (always `work`), the server's work-dir copy of the file,
  an unknown service (or a file never fetched) is 500 `docker compose failed (exit 1): ...`.
- `GET /status` (`in_flight`), `GET /host/gpu`, `GET /host/cache`, `GET /version`,
  `GET /v1/attestation/report[?nonce=<hex>]` (a non-hex nonce: 400 `nonce must be hex-encoded`).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from orchestrator_sim.apps.common import recorded_call
from orchestrator_sim.compose_manager.ops import ComposeError, Operation
from orchestrator_sim.compose_manager.repo import parse_compose_yaml
from orchestrator_sim.faults import ActiveFaults
from orchestrator_sim.host.containers import CONFIG_DIR, PROJECT
from orchestrator_sim.host.serving import nginx_error_page
from orchestrator_sim.host.sim_host import SimHost
from orchestrator_sim.record.calls import CallRecorder

COMMIT = "8e07c35"
STREAM_POLL_S = 0.005  # real seconds between looks at an operation's output
_HEX = re.compile(r"^(?:[0-9a-fA-F]{2})+$")
NONCE_BYTES = 32  # 8e07c35: the report_data's second half is the nonce itself, exactly 32 bytes
MISSING_AUTH = "Missing or invalid Authorization header"
INVALID_TOKEN = "Invalid token"


class StreamCut(Exception):
    """Raised inside a compose stream to break the connection before its `done` line."""


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"status": "error", "error": message}, status_code=status)


def compose_failed(stderr: str, code: int = 1) -> JSONResponse:
    """A docker compose command that exited non-zero (500, the server's wording)."""
    return error(500, f"docker compose failed (exit {code}):\nstderr: {stderr}\n\nstdout: ")


def auth_error(request: Request, token: str) -> JSONResponse | None:
    header = request.headers.get("authorization")
    scheme, _, value = (header or "").partition(" ")
    if header is None or scheme != "Bearer" or not value:
        return error(401, MISSING_AUTH)
    if not hmac.compare_digest(value.encode(), token.encode()):
        return error(401, INVALID_TOKEN)
    return None


async def ndjson(host: SimHost, op: Operation) -> AsyncIterator[bytes]:
    sent = 0
    while True:
        lines, done, cut = host.op_snapshot(op, sent)
        for event, data in lines:
            yield (json.dumps({"event": event, "data": data}, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        sent += len(lines)
        if cut:
            raise StreamCut(f"{op.action} stream cut by a simulated fault")
        if done:
            # the ports a started (or stopped) container opens (or closes) follow it before the
            # answer ends, as on a host: real start-up latency of the simulator's own listeners is
            # never counted as simulated time by the caller (a loaded machine; fleet/sim_fleet.py)
            settle = getattr(host, "settle_listeners", None)
            if settle is not None:
                await settle()
            if op.plan is not None:
                yield (json.dumps(op.plan, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
            yield (json.dumps({"event": "done", "success": op.success, "exit_code": op.exit_code}, separators=(",", ":")) + "\n").encode()
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
                if auth:
                    refused = auth_error(request, token)
                    if refused is not None:
                        return refused
                return await fn(request)

            return endpoint

        return wrap

    async def read_body(request: Request) -> tuple[object, str] | Response:
        raw = (await request.body()).decode("utf-8", "replace")
        try:
            return json.loads(raw), raw
        except ValueError as exc:
            return PlainTextResponse(
                f"Failed to parse the request body as JSON: {exc}", status_code=400
            )

    @route(auth=False)
    async def version(request: Request) -> Response:
        return JSONResponse(host.version())

    @route()
    async def status(request: Request) -> Response:
        return JSONResponse(host.status())

    async def _compose(request: Request, down: bool) -> Response:
        parsed = await read_body(request)
        if isinstance(parsed, Response):
            return parsed
        body, raw = parsed
        call = recorded_call(request)
        try:
            op = host.begin_down(body, call, raw) if down else host.begin_up(body, call, raw)
        except ComposeError as exc:
            if exc.plain:
                return PlainTextResponse(exc.message, status_code=exc.status)
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
        parsed = await read_body(request)
        if isinstance(parsed, Response):
            return parsed
        body, raw = parsed
        if not isinstance(body, dict):
            return PlainTextResponse(
                "Failed to deserialize the JSON body into the target type: invalid type, expected struct LogsRequest",
                status_code=422,
            )
        services = body.get("services") or []
        tail = body.get("tail", 100)
        file = body.get("file") or "docker-compose.yml"
        if (
            not isinstance(services, list)
            or not all(isinstance(s, str) for s in services)
            or not isinstance(tail, int)
            or isinstance(tail, bool)
            or tail < 0
            or not isinstance(file, str)
        ):
            return PlainTextResponse(
                "Failed to deserialize the JSON body into the target type: invalid type in services, tail or file",
                status_code=422,
            )
        # `project` is not a field of 8e07c35's logs request: whatever is sent, project `work`.
        copy = host.work_copy(file)
        if copy is None:
            return compose_failed(f"open {CONFIG_DIR}/{file}: no such file or directory")
        defined = set(parse_compose_yaml(copy.text).get("services") or {})
        for s in services:
            if s not in defined:
                return compose_failed(f"no such service: {s}")
        if not services:
            services = sorted(defined)
        return JSONResponse({"status": "ok", "output": host.compose_logs(services, tail, project=PROJECT)})

    @route()
    async def docker_ps(request: Request) -> Response:
        # what docker/ps lists running has its ports open, as on a host: a call whose client went
        # away before its answer ended (a SIGKILLed orchestrator) skipped the settle in `ndjson`,
        # so the next read settles the listeners first (real latency, never simulated time)
        settle = getattr(host, "settle_listeners", None)
        if settle is not None:
            await settle()
        return JSONResponse({"status": "ok", "output": "\n".join(host.ps_lines())})

    async def docker_ps_post(request: Request) -> Response:
        return Response(status_code=405)

    @route()
    async def host_gpu(request: Request) -> Response:
        return JSONResponse(host.host_gpu())

    @route()
    async def host_cache(request: Request) -> Response:
        return JSONResponse(host.host_cache())

    @route(auth=False)
    async def attestation(request: Request) -> Response:
        nonce = request.query_params.get("nonce")
        if nonce is not None and not _HEX.match(nonce):
            return error(400, "nonce must be hex-encoded")
        if nonce is not None and len(nonce) != 2 * NONCE_BYTES:
            return error(400, f"nonce must be exactly {NONCE_BYTES} bytes")
        return JSONResponse(host.attestation(nonce.lower() if nonce else None))

    async def ps_dispatch(request: Request) -> Response:
        if request.method == "POST":
            return await docker_ps_post(request)
        return await docker_ps(request)

    return Starlette(
        routes=[
            Route("/version", version, methods=["GET"]),
            Route("/status", status, methods=["GET"]),
            Route("/compose/up", compose_up, methods=["POST"]),
            Route("/compose/down", compose_down, methods=["POST"]),
            Route("/compose/logs", compose_logs, methods=["POST"]),
            Route("/docker/ps", ps_dispatch, methods=["GET", "POST"]),
            Route("/host/gpu", host_gpu, methods=["GET"]),
            Route("/host/cache", host_cache, methods=["GET"]),
            Route("/v1/attestation/report", attestation, methods=["GET"]),
        ]
    )
