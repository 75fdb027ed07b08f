"""Client for compose-manager (one per CVM; interfaces.md section 1).

Mutating calls (`up`, `down`): the request is validated first (`RequestInvalid`, nothing sent). A
connect failure is retried, then `TransportError`; 409 `Busy` is waited on and retried (the server
refused), then raised; 401 and 400 (`TagTooRecent`, `TagNotFound`, `BadRequest`) are raised. A 5xx
before the stream starts is `ServerError`, NOT retried: a proxy may answer 502 after docker compose
started, so callers treat it as an unknown outcome. Once the request was (possibly) sent, nothing
raises: a timeout, a reset, a stream without `done` or a malformed line give status "unknown" --
the command may have run: find out from `docker/ps`, never assume.

Secrets: the token and every env value join the client's `Redactor` before anything is sent;
errors, log events, `StreamOutcome.lines` and `plan_event` are scrubbed (a container name
equal to an env value shows as `***`: a dry-run plan then fails to match, the safe side). `logs()`
returns raw text for the gates to judge; its callers scrub what they show. Share one `Redactor`
across a run's clients and its structlog configuration.

The deployed server (8e07c35, `compose-manager-as-deployed.md`):
- `docker/ps` (GET only) lists the running containers of EVERY project: `ps()` filters by label.
- `compose/logs` always reads project `work`: `logs()` refuses another project (`RequestInvalid`).
- Projects `work` / `dstack` are reserved (400): omit the project for the default one.
- A dry run's stream carries `{"event":"plan",...}` before `done` (`StreamOutcome.plan_event`).
- `400 tag not found` may be GitHub rate-limiting the host: retried (retry.py), and the error says so.
- `/version`'s top level is the last ATTEMPTED up, `projects.work.current/previous` the last
  successful ones (`VersionInfo`); `status()` tells whether an operation holds the lock.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import httpx
import structlog

from orchestrator.hosts.clients.compose_manager_request import (
    SYSTEM,
    ComposeRequest,
    ComposeVerb,
    _invalid,
    validate_file,
    validate_project,
    validate_services,
)
from orchestrator.hosts.clients.compose_manager_stream import StreamOutcome, consume_stream
from orchestrator.hosts.clients.errors import (
    ComposeFailed,
    MalformedResponse,
    TagNotFound,
    TransportError,
    check_ok_envelope,
)
from orchestrator.hosts.clients.http_session import HttpSession
from orchestrator.hosts.clients.retry import call_with_retry
from orchestrator.hosts.envmap import EnvMap
from orchestrator.hosts.parsers import ParseError
from orchestrator.hosts.parsers.action_log import Action, parse_action_log
from orchestrator.hosts.parsers.compose_manager_reads import (
    DEFAULT_PROJECT,
    GpuInfo,
    HostCache,
    InFlight,
    VersionInfo,
    parse_host_cache,
    parse_host_gpu,
    parse_status,
)
from orchestrator.hosts.parsers.docker_ps import Container, parse_docker_ps

log = structlog.get_logger(__name__)
T = TypeVar("T")


class _SentButLost(Exception):
    """Internal: the request may have reached the server, then the connection failed."""


def _output(payload: dict[str, Any], route: str) -> str:
    output = payload.get("output")
    if not isinstance(output, str):
        raise MalformedResponse(SYSTEM, f"{route} answer has no 'output' text")
    return output


def _parsed(what: str, parse: Callable[[Any], T], payload: Any) -> T:
    try:
        return parse(payload)
    except ParseError as exc:
        raise MalformedResponse(SYSTEM, f"{what}: {exc}") from None


class ComposeManagerClient(HttpSession):
    system = SYSTEM
    empty_token = "empty bearer token"
    #: a compose/up or compose/down stream silent this long is given up ("unknown": it may still run)
    stream_idle_timeout_s: float = 900

    async def _read(self, method: str, path: str, *, what: str, json_body: Any = None, params: dict[str, str] | None = None) -> dict[str, Any]:
        return await self._read_json(method, path, what=f"{SYSTEM} {what}", json_body=json_body, params=params,
                                     check=lambda payload: check_ok_envelope(SYSTEM, payload, self.redactor))

    async def logs(self, file: str, services: Sequence[str], tail: int, project: str | None = None) -> str:
        """`docker compose logs --tail N` text, raw (gates judge it; whoever shows a line scrubs
        it there, with the lines around it). The server reads its own copy of `file` (from the last
        up or dry run of that path), project `work` only; an unknown service raises `ComposeFailed`."""
        validate_file(file)
        validate_services(list(services), allow_empty=True)
        if project is not None and project != DEFAULT_PROJECT:
            validate_project(project)
            raise _invalid("project", f"compose-manager (8e07c35) reads logs of the default project only, "
                                      f"not {project!r}; logs of another project are not possible until "
                                      "the server supports it")
        if not isinstance(tail, int) or isinstance(tail, bool) or tail < 0:
            raise _invalid("tail", "must be a non-negative integer")
        body: dict[str, Any] = {"file": file, "services": list(services), "tail": tail}
        try:
            payload = await self._read("POST", "/compose/logs", what="logs", json_body=body)
        except ComposeFailed as exc:
            if "no such service" in exc.stderr:
                raise ComposeFailed(SYSTEM, f"logs: {exc.stderr} (not defined in the host's copy of {file})",
                                    stderr=exc.stderr) from None
            raise
        return _output(payload, "compose/logs")

    async def ps(self, project: str | None = None) -> list[Container]:
        """The RUNNING containers of one compose project (None: the default `work`), of those of
        every project `GET /docker/ps` lists."""
        if project is not None and project != DEFAULT_PROJECT:
            validate_project(project)
        output = _output(await self._read("GET", "/docker/ps", what="ps"), "docker/ps")
        return [c for c in _parsed("docker/ps output", parse_docker_ps, output) if c.project == (project or DEFAULT_PROJECT)]

    async def version(self) -> VersionInfo:
        """`.project(p).current/.previous` (the last successful ups) are the only valid rollback targets."""
        return _parsed("version", VersionInfo, await self._read("GET", "/version", what="version"))

    async def status(self) -> InFlight | None:
        """The mutating operation holding the host's lock, or None when idle: poll until None
        before judging a broken stream's outcome from `ps()` / `version()`."""
        return _parsed("status", parse_status, await self._read("GET", "/status", what="status"))

    async def host_gpu(self) -> list[GpuInfo]:
        return _parsed("host/gpu", parse_host_gpu, await self._read("GET", "/host/gpu", what="host/gpu"))

    async def host_cache(self) -> HostCache:
        return _parsed("host/cache", parse_host_cache, await self._read("GET", "/host/cache", what="host/cache"))

    async def attestation_report(self) -> dict[str, Any]:
        nonce = secrets.token_hex(32)
        report = await self._read("GET", "/v1/attestation/report", what="attestation", params={"nonce": nonce})
        echoed = report.get("nonce")
        if echoed is not None and echoed != nonce:
            raise MalformedResponse(SYSTEM, "attestation report answers another nonce (stale or replayed)")
        return report

    async def action_log(self) -> list[Action]:
        return _parsed("action log", parse_action_log, await self.attestation_report())

    async def up(self, req: ComposeRequest, env: EnvMap) -> StreamOutcome:
        return await self._mutate("/compose/up", "up", req, env)

    async def down(self, req: ComposeRequest, env: EnvMap) -> StreamOutcome:
        return await self._mutate("/compose/down", "down", req, env)

    async def _mutate(self, route: str, action: ComposeVerb, req: ComposeRequest, env: EnvMap) -> StreamOutcome:
        req.validate(env, action=action)
        self.redactor.add(*env.redaction_values())
        body = req.body(env, action=action)
        where = dict(route=route, tag=req.tag, file=req.file)
        scope = dict(services=list(req.services), dry_run=req.dry_run if action == "up" else None)
        fields = dict(**where, project=req.project, **scope, force_recreate=req.force_recreate if action == "up" else None,
                      env_keys=len(env), env_keys_fingerprint=env.keys_fingerprint()[:16])
        log.info("compose.request", **self.redactor.scrub_obj(fields))
        stream_timeout = httpx.Timeout(self.timeout_s, read=self.stream_idle_timeout_s)

        async def open_stream() -> httpx.Response:
            try:
                return await self.request("POST", route, json_body=body, stream=True, timeout=stream_timeout)
            except TransportError as err:
                if err.request_sent:
                    raise _SentButLost(err.detail) from None
                raise

        try:
            response = await call_with_retry(open_stream, self.retry, mutating=True, what=f"{SYSTEM} {action}", clock=self._clock)
        except TagNotFound as exc:
            attempts = self.retry.tag_not_found_retries + 1
            raise TagNotFound(SYSTEM, f"{exc.detail} (answered {attempts} times). compose-manager asks GitHub "
                                      "unauthenticated and reports any GitHub failure (a rate limit, a 403, an "
                                      "outage) as 'tag not found': check that the tag exists in the host's "
                                      "repository, then retry later", status=exc.status) from None
        except _SentButLost as lost:
            outcome = StreamOutcome("unknown", None, [], error=f"request sent, then the connection failed: {lost}")
        else:
            outcome = await consume_stream(response, redactor=self.redactor, idle_timeout_s=self.stream_idle_timeout_s)
        outcome_fields = dict(**where, **scope, status=outcome.status, exit_code=outcome.exit_code,
                              lines=len(outcome.lines), error=outcome.error)
        log.info("compose.outcome", **self.redactor.scrub_obj(outcome_fields))
        return outcome
