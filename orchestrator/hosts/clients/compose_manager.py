"""Client for compose-manager (one per CVM; interfaces.md section 1).

Mutating calls (`up`, `down`) and what they return or raise:

- The request is validated first (`RequestInvalid`, nothing sent).
- A connect failure (nothing left us) is retried under the policy, then `TransportError`.
- 409 `Busy`: waited on and retried (bounded by the policy), then `Busy`. Safe: the server refused.
- 401 `Unauthorized`, 400 `TagTooRecent` / `TagNotFound` / `BadRequest`: raised, not retried.
- 5xx before the stream starts: `ServerError`, NOT retried. A proxy may answer 502 after the
  server received the request and started docker compose; a retry could run the operation twice.
  Callers treat a `ServerError` from a mutating call like an "unknown" outcome (check docker/ps).
- Once the request was (possibly) sent, transport failures never raise: a read timeout, a reset,
  a stream that ends without its `done` line, or a malformed NDJSON line give a `StreamOutcome`
  with status "unknown" -- the command may have run, may still be running: find out from
  `docker/ps`, never assume.

Secrets: the token and every env value are added to the client's `Redactor` before anything is
sent; error messages, log events, the events passed to `on_event` and `StreamOutcome.lines` are
scrubbed (a container name that happens to equal an env value shows as `***`: a dry-run plan
then fails to match, which stops the caller -- the safe side). Pass one shared `Redactor` to
every client (and to the structlog configuration) to scrub consistently across a run.

Reads (`logs`, `ps`, `version`, `action_log`, `status`, `host_gpu`, `host_cache`) retry transport
errors and 5xx under the policy (not `ComposeFailed`: docker compose's own refusal repeats).

The deployed server (commit 8e07c35, `compose-manager-as-deployed.md`) fixes these rules:
- `docker/ps` is GET only and lists the running containers of EVERY project: `ps()` filters by
  the `com.docker.compose.project` / `.service` labels here (project None = the default `work`).
- `compose/logs` has no `project`: it always reads project `work`, so `logs()` refuses a
  non-default project (`RequestInvalid`) rather than silently reading another project's logs.
- `project` `work` / `dstack` are reserved (400): omit it for the default project. The request
  validation refuses them before sending.
- A dry run's stream carries `{"event":"plan",...}` before `done`: kept as `StreamOutcome.plan_event`.
- `400 tag not found: T` may be GitHub rate-limiting the host: retried (see retry.py), and the
  final error says so.
- `/version`'s top-level fields are the last ATTEMPTED up; `projects.work.current/previous` the
  last successful ones (`VersionInfo`). `status()` tells whether an operation holds the lock.
"""

from __future__ import annotations

import inspect
import json
import re
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any, Literal

import httpx
import structlog

from orchestrator.hosts.clients.errors import (
    ComposeFailed,
    MalformedResponse,
    RequestInvalid,
    TagNotFound,
    check_ok_envelope,
    error_for_status,
    parse_json,
    transport_error,
)
from orchestrator.hosts.clients.retry import RetryPolicy, call_with_retry
from orchestrator.util.clock import Clock, RealClock
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
    parse_version,
)
from orchestrator.hosts.parsers.docker_ps import Container, parse_docker_ps
from orchestrator.hosts.redaction import Redactor, reveal
from orchestrator.hosts.clients.http_session import HttpSession

log = structlog.get_logger(__name__)

SYSTEM = "compose-manager"

ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SERVICE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
PROJECT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
#: compose-manager 8e07c35 answers 400 `compose project name "work" is reserved` for these.
RESERVED_PROJECTS = frozenset({DEFAULT_PROJECT, "dstack"})
_BAD_TEXT_RE = re.compile(r"[\x00-\x1f\x7f]")

ComposeVerb = Literal["up", "down"]
EventCallback = Callable[[dict[str, Any]], Any]


def _invalid(field_name: str, detail: str) -> RequestInvalid:
    return RequestInvalid(SYSTEM, f"{field_name}: {detail}", field=field_name)


def validate_file(file: Any) -> None:
    """A repository path: non-empty, relative, no `..`, no control characters."""
    if not isinstance(file, str) or not file.strip():
        raise _invalid("file", "must be a non-empty path in the compose-files repository")
    if _BAD_TEXT_RE.search(file):
        raise _invalid("file", "contains a control character")
    if file.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", file):
        raise _invalid("file", "must be relative to the repository root, not absolute")
    if ".." in PurePosixPath(file.replace("\\", "/")).parts:
        raise _invalid("file", "must not contain '..'")


def validate_services(services: Any, *, allow_empty: bool = False) -> None:
    if isinstance(services, str) or not isinstance(services, (list, tuple)):
        raise _invalid("services", "must be a list of service names")
    if not services and not allow_empty:
        raise _invalid("services", "must not be empty (an empty list means every service of the file)")
    for name in services:
        if not isinstance(name, str) or not name.strip():
            raise _invalid("services", "contains an empty service name")
        if not SERVICE_RE.match(name):
            raise _invalid("services", f"{name!r} is not a valid compose service name")


def validate_project(project: Any) -> None:
    """None (the default project `work`) or a non-reserved compose project name."""
    if project is None:
        return
    if not isinstance(project, str) or not PROJECT_RE.match(project):
        raise _invalid("project", "must be a compose project name ([a-z0-9][a-z0-9_-]*) or None")
    if project in RESERVED_PROJECTS:
        raise _invalid("project", f"{project!r} is reserved by compose-manager: omit it for the default project")


def validate_env(env: Any) -> None:
    if not isinstance(env, EnvMap):
        raise _invalid("env", f"must be an EnvMap read from the dashboard, got {type(env).__name__}")
    if len(env) == 0:
        raise _invalid("env", "is empty: every call passes the host's full env map")
    for key, value in env.items():
        if not ENV_KEY_RE.match(key):
            raise _invalid("env", f"key {key!r} does not match [A-Za-z_][A-Za-z0-9_]*")
        if "\n" in value or "\r" in value:
            raise _invalid("env", f"value of {key} contains a newline")  # never the value
        if "\x00" in value:
            raise _invalid("env", f"value of {key} contains a NUL byte")


@dataclass(frozen=True)
class ComposeRequest:
    tag: str
    file: str
    services: tuple[str, ...]
    project: str | None = None
    force_recreate: bool = False
    dry_run: bool = False
    allow_force_recreate: bool = False  # set only by a runbook step that explicitly allows it

    def __post_init__(self) -> None:
        if isinstance(self.services, list):
            object.__setattr__(self, "services", tuple(self.services))

    def validate(self, env: EnvMap, *, action: ComposeVerb = "up") -> None:
        """Raise `RequestInvalid` naming the first bad field (env values are never quoted)."""
        if not isinstance(self.tag, str) or not self.tag or any(c.isspace() for c in self.tag) or _BAD_TEXT_RE.search(self.tag):
            raise _invalid("tag", "must be a non-empty git tag without whitespace")
        validate_file(self.file)
        validate_services(self.services)
        validate_project(self.project)
        if not isinstance(self.force_recreate, bool) or not isinstance(self.dry_run, bool):
            raise _invalid("force_recreate", "force_recreate and dry_run must be booleans")
        if self.force_recreate and not self.allow_force_recreate:
            raise _invalid("force_recreate", "true is only allowed by a step that explicitly allows it")
        if action == "down" and self.dry_run:
            raise _invalid("dry_run", "compose/down ignores dry_run and would act at once; refusing")
        validate_env(env)

    def _base(self) -> dict[str, Any]:
        body: dict[str, Any] = {"tag": self.tag, "file": self.file}
        if self.project is not None:
            body["project"] = self.project
        body["services"] = list(self.services)
        return body

    def body(self, env: EnvMap, *, action: ComposeVerb = "up") -> dict[str, Any]:
        """The JSON body. Holds every env value: never log it (use `redacted`)."""
        body = self._base()
        body["env"] = env.as_body()
        if action == "up":
            body["force_recreate"] = self.force_recreate
            body["dry_run"] = self.dry_run
        return body

    def redacted(self, n_keys: int | None = None, *, action: ComposeVerb = "up") -> dict[str, Any]:
        """The body as it may be logged or journaled: env shown as `<env map: N keys>`."""
        body = self._base()
        body["env"] = f"<env map: {n_keys} keys>" if n_keys is not None else "<env map>"
        if action == "up":
            body["force_recreate"] = self.force_recreate
            body["dry_run"] = self.dry_run
        return body

    def as_apply(self) -> ComposeRequest:
        return replace(self, dry_run=False)

    def as_dry_run(self) -> ComposeRequest:
        return replace(self, dry_run=True)

    def same_request(self, other: ComposeRequest) -> bool:
        """Equal in every field except `dry_run` (the apply matches the dry run it follows)."""
        return isinstance(other, ComposeRequest) and replace(other, dry_run=self.dry_run) == self


@dataclass
class StreamOutcome:
    status: Literal["success", "failure", "unknown"]
    exit_code: int | None
    lines: list[str] = field(default_factory=list)
    error: str | None = None
    events: int = 0
    done_seen: bool = False
    #: A dry run's `{"event":"plan","exit_code":N,"plan":{"create","recreate","remove","unchanged"},...}`
    #: (compose-manager 8e07c35), scrubbed; None when the stream had none.
    plan_event: dict[str, Any] | None = None

    @property
    def succeeded(self) -> bool:
        return self.status == "success"

    @property
    def unknown(self) -> bool:
        return self.status == "unknown"


class _SentButLost(Exception):
    """Internal: the request may have reached the server, then the connection failed."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class ComposeManagerClient(HttpSession):
    def __init__(
        self,
        base_url: str,
        token: Any,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        retry: RetryPolicy | None = None,
        timeout_s: float = 30,
        stream_idle_timeout_s: float = 900,
        redactor: Redactor | None = None,
        clock: Clock | None = None,
    ) -> None:
        secret = reveal(token)
        if not secret:
            raise RequestInvalid(SYSTEM, "token: empty bearer token", field="token")
        self._open_session(base_url, secret, transport=transport, timeout_s=timeout_s, redactor=redactor)
        self.retry = retry or RetryPolicy()
        self.timeout_s = timeout_s
        self.stream_idle_timeout_s = stream_idle_timeout_s
        self._clock = clock or RealClock()





    # ---------------------------------------------------------------- reads

    async def _read(self, method: str, path: str, *, what: str, json_body: Any = None, params: dict[str, str] | None = None) -> dict[str, Any]:
        async def attempt() -> dict[str, Any]:
            try:
                response = await self._http.request(method, path, json=json_body, params=params)
            except httpx.HTTPError as exc:
                raise transport_error(SYSTEM, exc, self.redactor) from None
            if not response.is_success:
                raise error_for_status(SYSTEM, response, self.redactor)
            return check_ok_envelope(SYSTEM, parse_json(SYSTEM, response, self.redactor), self.redactor)

        return await call_with_retry(attempt, self.retry, mutating=False, what=f"{SYSTEM} {what}", clock=self._clock)

    async def logs(self, file: str, services: Sequence[str], tail: int, project: str | None = None, *, scrub: bool = True) -> str:
        """`docker compose logs --tail N` text, scrubbed with the client's redactor unless `scrub=False`.

        Scrubbing replaces env values (labels included) in engine lines too; a caller matching
        log milestones on raw text passes `scrub=False` and scrubs before storing anything.
        Keep one choice for the life of a `LogFollower`: its overlap matching compares texts.
        The server reads its own copy of `file` (written by the last up or dry run of that path)
        and project `work` only; an unknown service raises `ComposeFailed`.
        """
        validate_file(file)
        validate_services(list(services), allow_empty=True)
        if project is not None and project != DEFAULT_PROJECT:
            validate_project(project)
            raise _invalid(
                "project",
                f"compose-manager (8e07c35) reads logs of the default project only, not {project!r}; "
                "logs of another project are not possible until the server supports it",
            )
        if not isinstance(tail, int) or isinstance(tail, bool) or tail < 0:
            raise _invalid("tail", "must be a non-negative integer")
        body: dict[str, Any] = {"file": file, "services": list(services), "tail": tail}
        try:
            payload = await self._read("POST", "/compose/logs", what="logs", json_body=body)
        except ComposeFailed as exc:
            if "no such service" in exc.stderr:
                raise ComposeFailed(
                    SYSTEM, f"logs: {exc.stderr} (not defined in the host's copy of {file})", stderr=exc.stderr
                ) from None
            raise
        output = payload.get("output")
        if not isinstance(output, str):
            raise MalformedResponse(SYSTEM, "compose/logs answer has no 'output' text")
        return self.redactor.scrub(output) if scrub else output

    async def ps(self, project: str | None = None, services: Sequence[str] | None = None) -> list[Container]:
        """The RUNNING containers of one compose project (None: the default `work`), optionally
        of some services only.

        `GET /docker/ps` (the only form 8e07c35 serves; POST is 405) lists every project's running
        containers, exited one-shots excluded; the project/service filter is applied here, by the
        `com.docker.compose.project` / `.service` labels. `ps_all()` gives the unfiltered list.
        """
        if project is not None and project != DEFAULT_PROJECT:
            validate_project(project)
        if services is not None:
            validate_services(list(services), allow_empty=True)
        wanted_project = project or DEFAULT_PROJECT
        wanted = set(services) if services else None
        return [
            c
            for c in await self.ps_all()
            if c.project == wanted_project and (wanted is None or c.service in wanted)
        ]

    async def ps_all(self) -> list[Container]:
        """`GET /docker/ps`, parsed: running containers of every project on the host."""
        payload = await self._read("GET", "/docker/ps", what="ps")
        output = payload.get("output")
        if not isinstance(output, str):
            raise MalformedResponse(SYSTEM, "docker/ps answer has no 'output' text")
        try:
            return parse_docker_ps(output)
        except ParseError as exc:
            raise MalformedResponse(SYSTEM, f"docker/ps output: {exc}") from None

    async def version(self) -> VersionInfo:
        """`GET /version` as a `VersionInfo` (still a mapping of the raw answer).

        Top-level `tag/commit/file` = the last ATTEMPTED up; `.project(p).current/.previous` = the
        last successful ups of project p (None: `work`), the only valid rollback targets.
        """
        payload = await self._read("GET", "/version", what="version")
        try:
            return parse_version(payload)
        except ParseError as exc:
            raise MalformedResponse(SYSTEM, f"version: {exc}") from None

    async def status(self) -> InFlight | None:
        """The mutating operation holding the host's lock (`GET /status`), or None when idle.

        The direct way to tell whether an up whose stream broke is still running: poll until None
        before judging the outcome from `ps()` / `version()`.
        """
        payload = await self._read("GET", "/status", what="status")
        try:
            return parse_status(payload)
        except ParseError as exc:
            raise MalformedResponse(SYSTEM, f"status: {exc}") from None

    async def host_gpu(self) -> list[GpuInfo]:
        """`GET /host/gpu`: per GPU index, its memory, utilization and the containers holding it."""
        payload = await self._read("GET", "/host/gpu", what="host/gpu")
        try:
            return parse_host_gpu(payload)
        except ParseError as exc:
            raise MalformedResponse(SYSTEM, f"host/gpu: {exc}") from None

    async def host_cache(self) -> HostCache:
        """`GET /host/cache`: the model-cache volumes and the weights (`models--org--repo`) held."""
        payload = await self._read("GET", "/host/cache", what="host/cache")
        try:
            return parse_host_cache(payload)
        except ParseError as exc:
            raise MalformedResponse(SYSTEM, f"host/cache: {exc}") from None

    async def attestation_report(self) -> dict[str, Any]:
        nonce = secrets.token_hex(32)
        report = await self._read("GET", "/v1/attestation/report", what="attestation", params={"nonce": nonce})
        echoed = report.get("nonce")
        if echoed is not None and echoed != nonce:
            raise MalformedResponse(SYSTEM, "attestation report answers another nonce (stale or replayed)")
        return report

    async def action_log(self) -> list[Action]:
        report = await self.attestation_report()
        try:
            return parse_action_log(report)
        except ParseError as exc:
            raise MalformedResponse(SYSTEM, f"action log: {exc}") from None

    # ---------------------------------------------------------------- mutating calls

    async def up(self, req: ComposeRequest, env: EnvMap, on_event: EventCallback | None = None) -> StreamOutcome:
        return await self._mutate("/compose/up", "up", req, env, on_event)

    async def down(self, req: ComposeRequest, env: EnvMap, on_event: EventCallback | None = None) -> StreamOutcome:
        return await self._mutate("/compose/down", "down", req, env, on_event)

    async def _mutate(self, route: str, action: ComposeVerb, req: ComposeRequest, env: EnvMap, on_event: EventCallback | None) -> StreamOutcome:
        req.validate(env, action=action)
        self.redactor.add(*env.redaction_values())
        body = req.body(env, action=action)
        fields = dict(
            route=route,
            tag=req.tag,
            file=req.file,
            project=req.project,
            services=list(req.services),
            dry_run=req.dry_run if action == "up" else None,
            force_recreate=req.force_recreate if action == "up" else None,
            env_keys=len(env),
            env_keys_fingerprint=env.keys_fingerprint()[:16],
        )
        log.info("compose.request", **self.redactor.scrub_obj(fields))
        stream_timeout = httpx.Timeout(self.timeout_s, read=self.stream_idle_timeout_s)

        async def open_stream() -> httpx.Response:
            request = self._http.build_request("POST", route, json=body, timeout=stream_timeout)
            try:
                response = await self._http.send(request, stream=True)
            except httpx.HTTPError as exc:
                err = transport_error(SYSTEM, exc, self.redactor)
                if err.request_sent:
                    raise _SentButLost(err.detail) from None
                raise err from None
            if not response.is_success:
                try:
                    await response.aread()
                except httpx.HTTPError:
                    pass
                finally:
                    await response.aclose()
                raise error_for_status(SYSTEM, response, self.redactor)
            return response

        try:
            response = await call_with_retry(open_stream, self.retry, mutating=True, what=f"{SYSTEM} {action}", clock=self._clock)
        except TagNotFound as exc:
            attempts = self.retry.tag_not_found_retries + 1
            raise TagNotFound(
                SYSTEM,
                f"{exc.detail} (answered {attempts} times). compose-manager asks GitHub unauthenticated and "
                "reports any GitHub failure (a rate limit, a 403, an outage) as 'tag not found': check that "
                "the tag exists in the host's repository, then retry later",
                status=exc.status,
            ) from None
        except _SentButLost as lost:
            outcome = StreamOutcome("unknown", None, [], error=f"request sent, then the connection failed: {lost.detail}")
        else:
            outcome = await self._consume(response, on_event)
        outcome_fields = dict(
            route=route,
            tag=req.tag,
            file=req.file,
            services=list(req.services),
            dry_run=req.dry_run if action == "up" else None,
            status=outcome.status,
            exit_code=outcome.exit_code,
            lines=len(outcome.lines),
            error=outcome.error,
        )
        log.info("compose.outcome", **self.redactor.scrub_obj(outcome_fields))
        return outcome

    async def _consume(self, response: httpx.Response, on_event: EventCallback | None) -> StreamOutcome:
        lines: list[str] = []
        problems: list[str] = []
        done: dict[str, Any] | None = None
        plan_event: dict[str, Any] | None = None
        events = 0
        line_no = 0

        async def handle(raw: bytes) -> None:
            nonlocal done, events, line_no, plan_event
            line_no += 1
            text = raw.decode("utf-8", "replace").strip()
            if not text:
                return
            try:
                event = json.loads(text)
            except ValueError:
                problems.append(f"malformed NDJSON line {line_no} ({len(text)} chars, not JSON)")
                return
            if not isinstance(event, dict) or not isinstance(event.get("event"), str):
                problems.append(f"malformed NDJSON line {line_no} (no 'event' field)")
                return
            kind = event["event"]
            if kind in ("stdout", "stderr"):
                data = event.get("data")
                if not isinstance(data, str):
                    problems.append(f"malformed NDJSON line {line_no} ({kind} event without 'data' text)")
                    return
                data = self.redactor.scrub(data)
                lines.append(data)
                safe: dict[str, Any] = {"event": kind, "data": data}
            elif kind == "done":
                if done is not None:
                    problems.append(f"second 'done' event on line {line_no}")
                done = event
                safe = self.redactor.scrub_obj(event)
            elif kind == "plan":
                safe = self.redactor.scrub_obj(event)
                if plan_event is not None:
                    problems.append(f"second 'plan' event on line {line_no}")
                plan_event = safe
            else:
                log.debug("compose.stream.unknown_event", kind=self.redactor.scrub(kind), line=line_no)
                safe = self.redactor.scrub_obj(event)
            if done is not None and kind != "done":
                log.warning("compose.stream.after_done", line=line_no, kind=self.redactor.scrub(kind))
            events += 1
            if on_event is not None:
                result = on_event(safe)
                if inspect.isawaitable(result):
                    await result

        buffer = b""
        try:
            async for chunk in response.aiter_bytes():
                *complete, buffer = (buffer + chunk).split(b"\n")
                for raw in complete:
                    await handle(raw)
            if buffer:
                # A last line without its newline: complete JSON is accepted, a cut line is malformed.
                await handle(buffer)
                buffer = b""
        except httpx.ReadTimeout:
            problems.append(f"no stream data for {self.stream_idle_timeout_s:g} s (read timeout)")
        except httpx.HTTPError as exc:
            problems.append(f"stream broke: {transport_error(SYSTEM, exc, self.redactor).detail}")
        finally:
            await response.aclose()

        outcome = self._judge(lines, problems, done, events)
        outcome.plan_event = plan_event
        return outcome

    @staticmethod
    def _judge(lines: list[str], problems: list[str], done: dict[str, Any] | None, events: int) -> StreamOutcome:
        exit_code = None
        if done is not None:
            code = done.get("exit_code")
            exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
        if problems:
            return StreamOutcome("unknown", exit_code, lines, "; ".join(problems), events, done is not None)
        if done is None:
            return StreamOutcome("unknown", None, lines, f"stream ended after {events} events without a 'done' event", events, False)
        success = done.get("success")
        if not isinstance(success, bool):
            return StreamOutcome("unknown", exit_code, lines, "'done' event without a boolean 'success'", events, True)
        if success and exit_code not in (0, None):
            return StreamOutcome("unknown", exit_code, lines, f"'done' says success with exit code {exit_code}", events, True)
        if success:
            return StreamOutcome("success", exit_code, lines, None, events, True)
        last = next((line for line in reversed(lines) if line.strip()), "")
        reason = f"docker compose failed (exit code {exit_code})"
        if last:
            reason += f"; last output: {last.strip()[:300]}"
        return StreamOutcome("failure", exit_code, lines, reason, events, True)
