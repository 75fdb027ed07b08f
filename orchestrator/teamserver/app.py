"""The `orchestrate serve` app: routes and the factory.

Routes (JSON). `viewer` and `operator` are the roles of orchestrator/teamserver/auth.py; in
single-token mode the token is an operator.

    GET  /healthz                 {"status": "ok"} or 503 {"status": "not ok"}   (token if protect_metrics)
    GET  /metrics                 Prometheus text                                 (token if protect_metrics)
    GET  /runs[?host=&limit=]     viewer    {"runs": [summary, ...]}, newest first
    GET  /whoami                  viewer    {"name", "role"} of the token
    GET  /ui, /ui/runs/{id}       the web page (orchestrator/teamserver/pages.py; data via /ui/fragments/*, viewer)
    GET  /runs/{id}[?events_after=N]  viewer  summary + transitions + effects (+ lease, + this server's view)
    POST /runs                    operator  {"action": "rollout"|"rollback"|"resume", ...} -> 202 {"run_id": ...}
    POST /runs/{id}/approve       operator  {"gate": GATE|"*" (none: the waiting one), "at_gate": false}  (a browser: at_gate, a named gate)
    POST /runs/{id}/abort         operator  {}
    POST /runs/{id}/pause         operator  {}   the runner stops before its next safe step
    POST /runs/{id}/continue      operator  {}

Every request first passes orchestrator/teamserver/guards.py (Host, Origin, Content-Type, size).
Errors: orchestrator/teamserver/errors.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio.to_thread
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

import orchestrator
from orchestrator.hosts.clients.errors import ClientError
from orchestrator.journal import POSTGRES_PREFIXES
from orchestrator.journal.base import JournalError, LeaseHeld, RunNotFound
from orchestrator.language.runbook import RUNBOOK_DIR
from orchestrator.service.session import Session, owner_id
from orchestrator.teamserver import pages
from orchestrator.teamserver.auth import Authenticator, Principal, TokensFile, check_token_strength
from orchestrator.teamserver.config import ServerConfig, ServerRedactor, server_logger
from orchestrator.teamserver.errors import ApiError, PathScrubber, error_response
from orchestrator.teamserver.guards import TOKENS_UNUSABLE, RequestGuard, allowed_host_set, parse_json
from orchestrator.teamserver.metrics import Snapshot
from orchestrator.teamserver.schemas import SUBMIT, ApproveBody, SignalBody, validation_message
from orchestrator.teamserver.worker import SessionFactory, Worker
from orchestrator.util.exit_codes import ExitCode
from orchestrator.util.settings import Settings
from orchestrator.util.user_errors import Refused, UserError

Handler = Callable[[Request, Principal, Worker], Awaitable[Response]]


def _route(role: str | None) -> Callable[[Handler], Callable[[Request], Awaitable[Response]]]:
    """Authenticate (role None: open), check the role, map errors to one-line JSON answers."""

    def deco(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        @functools.wraps(handler)
        async def wrapped(request: Request) -> Response:
            state = request.app.state
            principal = state.auth.authenticate(request.headers.get("authorization"))
            if role is not None:
                if principal is None and state.auth.tokens_unusable():
                    return error_response(503, TOKENS_UNUSABLE, ExitCode.UNEXPECTED)
                if principal is None:
                    return error_response(401, "missing or wrong bearer token (ORCHESTRATOR_SERVER_TOKEN)",
                                          ExitCode.BAD_INPUT)
                if not principal.may(role):
                    return error_response(403, f"{principal.name} is a {principal.role}: only an {role} may do this",
                                          ExitCode.BAD_INPUT)
            worker: Worker = state.worker
            public: Callable[[str], str] = state.public_text
            bad = _control_chars(request)
            if bad is not None:
                return error_response(400, bad, ExitCode.BAD_INPUT)
            try:
                return await handler(request, principal or Principal("anonymous", "viewer", verified=False), worker)
            except ApiError as exc:
                return error_response(exc.status, public(exc.message), exc.code)
            except ValidationError as exc:
                return error_response(400, public(validation_message(exc)), ExitCode.BAD_INPUT)
            except _ANSWERED as exc:
                status, code = next((s, c) for kind, s, c in _ANSWERS if isinstance(exc, kind))
                return error_response(status, public(str(exc)), getattr(exc, "code", 0) if code is None else code)
            except JournalError as exc:
                worker.log.error("journal_error", path=request.url.path, error=str(exc))
                return error_response(500, "the journal refused the request; the server's log has the details",
                                      ExitCode.UNEXPECTED)
            except Exception as exc:  # noqa: BLE001 - an answer, and a log line with the traceback
                worker.log.error("request_failed", path=request.url.path, exc_info=exc)
                return error_response(500, "internal error; the server's log has the details", ExitCode.UNEXPECTED)

        return wrapped

    return deco


#: Errors answered with their own one line: (kind, status, exit code; None: the error's own), the
#: first kind that matches (a Refused is a UserError, a RunNotFound and a LeaseHeld JournalErrors).
_ANSWERS: tuple[tuple[type[Exception], int, ExitCode | None], ...] = (
    (Refused, 409, None), (UserError, 400, None), (RunNotFound, 404, ExitCode.BAD_INPUT),
    (LeaseHeld, 409, ExitCode.ABORTED), (ClientError, 502, ExitCode.UNEXPECTED))
_ANSWERED = tuple(kind for kind, _, _ in _ANSWERS)


def _control_chars(request: Request) -> str | None:
    """A NUL or other control character in the path or a query value: the one line of a 400
    (the journal refuses it, which would be a 500 with a traceback)."""
    for name, value in request.path_params.items():
        if _CONTROL.search(str(value)):
            return f"{name} holds a control character"
    for name, value in request.query_params.multi_items():
        if _CONTROL.search(name) or _CONTROL.search(value):
            return f"the query parameter {name[:30]!r} holds a control character"
    return None


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


async def _json_body(request: Request, *, optional: bool = False) -> Any:
    raw = await request.body()
    if not raw.strip():
        if optional:
            return {}
        raise ApiError(400, "the request needs a JSON body", ExitCode.BAD_INPUT)
    return _map_strings(parse_json(raw), _no_nul, keys=True)


def _no_nul(text: str) -> str:
    if "\x00" in text:
        raise ApiError(400, "the request body holds a NUL character", ExitCode.BAD_INPUT)
    return text


def _by(request: Request, principal: Principal, given: str | None) -> str:
    """Who the journal records: the token's name when the server knows it, else the client's word
    (text for a person: scrubbed before it is journaled)."""
    if principal.verified:
        return principal.name
    who = request.app.state.worker.redactor.scrub(" ".join((given or "").split())[:100]) or "anonymous"
    client = request.client.host if request.client else "?"
    return f"{who} via {client} to {socket.gethostname()}"  # readable: never the raw pid:boot-uuid


def _query_int(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name, str(default))
    if not raw.isascii() or not raw.lstrip("-").isdigit() or len(raw) > 9:
        raise ApiError(400, f"{name} must be a number", ExitCode.BAD_INPUT)
    return max(low, min(high, int(raw)))


async def healthz(request: Request, principal: Principal, worker: Worker) -> Response:
    value, ok = await request.app.state.health.get()
    if ok and value:
        return JSONResponse({"status": "ok"})
    return JSONResponse({"status": "not ok"}, status_code=503)


async def metrics(request: Request, principal: Principal, worker: Worker) -> Response:
    return Response(await worker.metrics.render(), media_type=CONTENT_TYPE_LATEST)


async def submit_run(request: Request, principal: Principal, worker: Worker) -> Response:
    body = SUBMIT.validate_python(await _json_body(request))
    active = await worker.submit(body, by=_by(request, principal, body.by))
    return JSONResponse({"run_id": active.run_id}, status_code=202)


async def list_runs(request: Request, principal: Principal, worker: Worker) -> Response:
    host = request.query_params.get("host") or None
    if host is not None and len(host) > 64:
        raise ApiError(400, "host is at most 64 characters", ExitCode.BAD_INPUT)
    limit = _query_int(request, "limit", 50, 1, 1000)
    runs = await _single_flight(request.app.state.inflight, ("runs", host, limit),
                                lambda: anyio.to_thread.run_sync(worker.list_runs, host, limit))
    return JSONResponse(worker.redactor.scrub_obj({"runs": runs}))


async def _single_flight(inflight: dict[Any, Any], key: Any, read: Callable[[], Awaitable[Any]]) -> Any:
    """Requests for the same read while one is in flight share its answer (a crowd polling
    GET /runs costs one journal read at a time, not one each); the answer is never older than
    the read that was already running when the request came in."""
    future = inflight.get(key)
    if future is None:
        future = asyncio.ensure_future(read())
        inflight[key] = future
        future.add_done_callback(lambda _: inflight.pop(key, None))
    return await asyncio.shield(future)


async def get_run(request: Request, principal: Principal, worker: Worker) -> Response:
    after = _query_int(request, "events_after", 0, 0, 2**31)
    run_id = request.path_params["run_id"]
    detail = await anyio.to_thread.run_sync(functools.partial(worker.run_detail, run_id, events_after=after))
    return JSONResponse(request.app.state.public_obj(worker.redactor.scrub_obj(detail)))


def _map_strings(obj: Any, fn: Callable[[str], str], *, keys: bool = False) -> Any:
    """`obj` with `fn` applied to each string in it (to each key too with `keys`)."""
    if isinstance(obj, str):
        return fn(obj)
    if isinstance(obj, dict):
        return {(fn(k) if keys else k): _map_strings(v, fn, keys=keys) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_map_strings(v, fn, keys=keys) for v in obj]
    return obj


async def approve_run(request: Request, principal: Principal, worker: Worker) -> Response:
    body = ApproveBody.model_validate(await _json_body(request, optional=True))
    by = _by(request, principal, body.by)
    # a browser (it sends Sec-Fetch-Site or Origin on a POST) approves only the waiting gate, by name
    at_gate = body.at_gate or "sec-fetch-site" in request.headers or "origin" in request.headers
    answer = await anyio.to_thread.run_sync(functools.partial(
        worker.approve, request.path_params["run_id"], body.gate, by, body.now, at_gate=at_gate))
    return JSONResponse(worker.redactor.scrub_obj(answer))


async def signal_run(request: Request, principal: Principal, worker: Worker) -> Response:
    """POST /runs/{id}/pause, /continue, /abort: `Worker.signal`, its answer as JSON."""
    body = SignalBody.model_validate(await _json_body(request, optional=True))
    by = _by(request, principal, body.by)
    action = request.url.path.rsplit("/", 1)[1]  # the route's last segment
    answer = await anyio.to_thread.run_sync(worker.signal, action, request.path_params["run_id"], by)
    return JSONResponse(worker.redactor.scrub_obj(answer))


def create_app(settings: Settings, *, session_factory: SessionFactory | None = None, token: str | None = None,
               tokens_file: Path | None = None, insecure_no_auth: bool = False, allowed_hosts: list[str] | None = None,
               bind: str | None = None, protect_metrics: bool = False, adopt: bool = True) -> Starlette:
    """The `orchestrate serve` app.

    `session_factory(settings)` opens the journal and inventory once (default `Session.open`).
    Auth: `tokens_file`, else `token` (defaults: ORCHESTRATOR_SERVER_TOKENS_FILE, _TOKEN); neither
    is refused unless `insecure_no_auth` (loopback only: `serving.check_exposure` knows the bind).
    `allowed_hosts`: extra Host names besides the loopback names and `bind`. `adopt`: the adoption
    loop runs every third of the lease TTL (an orphan is adopted within about 1.3 TTL).
    """
    config = ServerConfig()
    token = (config.token.get_secret_value() if token is None else token).strip() or None
    tokens_file = config.tokens_file if tokens_file is None else tokens_file
    if tokens_file is not None and token is not None:
        raise UserError("set either ORCHESTRATOR_SERVER_TOKEN (one shared token) or a tokens file, not both")
    if token is None and tokens_file is None and not insecure_no_auth:
        raise UserError(
            "refusing to serve without a token: set ORCHESTRATOR_SERVER_TOKEN or --tokens-file "
            "(or pass --insecure-no-auth, loopback only, to serve every route unauthenticated)"
        )
    if token is not None:
        check_token_strength(token)
    redactor = ServerRedactor(*settings.tokens(), token)  # None adds nothing
    log = server_logger(redactor)

    def tokens_file_changed(error: str | None) -> None:
        # one line per change: the file refused (requests needing a token get 503) or usable again
        if error is not None:
            log.error("tokens_file_refused", error=error, detail="no token is accepted until it is fixed")
        else:
            log.info("tokens_file_usable", path=str(tokens_file))

    # a file refused at start-up stops the start here (UserError: one line naming it, exit 2)
    auth = Authenticator(token=token, open_access=insecure_no_auth,
                         tokens_file=TokensFile(tokens_file, on_change=tokens_file_changed) if tokens_file else None)
    # where the journal and the state directory live is the server's own business: scrubbed from every answer
    scrub_paths = PathScrubber(settings.state_dir, settings.journal_url(), settings.journal_location(),
                               settings.inventory, RUNBOOK_DIR, Path(orchestrator.__file__).parent, tokens_file)

    def public_text(text: str) -> str:
        return redactor.scrub(scrub_paths(text))

    worker = Worker(settings, session_factory or Session.open, redactor, log)
    health = Snapshot(worker.healthy, max_age=1.0)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if auth.mode == "none":
            log.warning("serving_without_auth", detail="--insecure-no-auth: anyone who reaches this port can roll hosts")
        _ = worker.session  # open the journal now: a wrong URL fails the start, not the first request
        missing = [name for name in ("compose_manager_token", "dashboard_token", "model_proxy_token", "inference_token")
                   if not getattr(settings, name).get_secret_value()]
        if missing:
            log.warning("host_tokens_missing", missing=[f"ORCHESTRATOR_{n.upper()}" for n in missing],
                        detail="runs will fail when they first call a host")
        hup = _install_sighup(auth, log)
        journal = "postgresql" if settings.database_url.startswith(POSTGRES_PREFIXES) else "sqlite"
        log.info("serving", journal=journal, owner=owner_id(), auth=auth.mode, adopt=adopt)
        adoption = (asyncio.get_running_loop().create_task(
            worker.adopt_loop(max(settings.lease_ttl / 3, 0.2)), name="adoption") if adopt else None)
        try:
            yield
        finally:
            if adoption is not None:
                adoption.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await adoption
            hup()
            await worker.shutdown()
            log.info("stopped")

    checks = "viewer" if protect_metrics else None
    app = Starlette(
        routes=[
            Route("/healthz", _route(checks)(healthz), methods=["GET"]),
            Route("/metrics", _route(checks)(metrics), methods=["GET"]),
            Route("/runs", _route("operator")(submit_run), methods=["POST"]),
            Route("/runs", _route("viewer")(list_runs), methods=["GET"]),
            Route("/runs/{run_id}", _route("viewer")(get_run), methods=["GET"]),
            Route("/runs/{run_id}/approve", _route("operator")(approve_run), methods=["POST"]),
            *(Route(f"/runs/{{run_id}}/{action}", _route("operator")(signal_run), methods=["POST"])
              for action in ("abort", "pause", "continue")),
            # the web page: shells and static files carry no data; the fragments and /whoami need a viewer's token
            Route("/", lambda request: RedirectResponse("/ui", status_code=303), methods=["GET"]),
            Route("/ui", pages.shell("runs", "Runs"), methods=["GET"]),
            Route("/ui/runs/{run_id}", pages.shell("run", "{}"), methods=["GET"]),
            Route("/ui/static/{name}", pages.static_file, methods=["GET"]),
            Route("/favicon.ico", lambda request: RedirectResponse("/ui/static/favicon.svg", status_code=301),
                  methods=["GET"]),
            Route("/ui/fragments/runs", _route("viewer")(pages.runs_fragment), methods=["GET"]),
            Route("/ui/fragments/runs/{run_id}", _route("viewer")(pages.run_fragment), methods=["GET"]),
            Route("/ui/fleet/{runbook}", pages.shell("fleet", "Fleet: {}"), methods=["GET"]),
            Route("/ui/fragments/fleet/{runbook}", _route("viewer")(pages.fleet_fragment), methods=["GET"]),
            Route("/whoami", _route("viewer")(pages.whoami), methods=["GET"]),
        ],
        middleware=[Middleware(RequestGuard, allowed_hosts=allowed_host_set(bind, allowed_hosts or ()), auth=auth)],
        exception_handlers={HTTPException: _http_error},
        lifespan=lifespan,
    )
    app.state.worker = worker
    app.state.inflight = {}
    app.state.auth = auth
    app.state.health = health
    app.state.public_text = public_text
    app.state.public_obj = lambda obj: _map_strings(obj, scrub_paths)
    return app


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404/405 answers, in this API's JSON shape."""
    status = getattr(exc, "status_code", 500)
    detail = {404: "no such route", 405: "method not allowed on this route"}.get(status, str(getattr(exc, "detail", "")))
    return error_response(status, detail, ExitCode.BAD_INPUT)


def _install_sighup(auth: Authenticator, log: Any) -> Callable[[], None]:
    """SIGHUP re-reads the tokens file (where the loop can take signals: the main thread)."""
    if auth.tokens_file is None or not hasattr(signal, "SIGHUP"):
        return lambda: None
    loop = asyncio.get_running_loop()

    def reload() -> None:
        auth.tokens_file.reload()  # type: ignore[union-attr]  # reload is installed only when a tokens file is configured
        if auth.tokens_file.error is None:  # type: ignore[union-attr]  # reload is installed only when a tokens file is configured
            log.info("tokens_reloaded")  # a refused file has its own line (tokens_file_refused)

    try:
        loop.add_signal_handler(signal.SIGHUP, reload)
    except (ValueError, RuntimeError, NotImplementedError):  # not the main thread (tests), or no signals
        return lambda: None
    return lambda: loop.remove_signal_handler(signal.SIGHUP)
