"""Contract (a): for EACH recorded exchange with the real compose-manager 8e07c35, our client
parses the real answer as the server meant it, or raises the error the answer stands for.

The real answer is served by an httpx.MockTransport exactly as recorded (status, content type,
body; a clipped body as its complete prefix, see recorded_exchanges.py). The request is the one
the exchange made, rebuilt as a client call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import httpx
import pytest
from fast_retry import immediate_retry

from orchestrator.hosts.clients.compose_manager import ComposeManagerClient, ComposeRequest
from orchestrator.hosts.clients.errors import (
    BadRequest,
    Busy,
    ComposeFailed,
    RequestInvalid,
    TagNotFound,
    TagTooRecent,
    Unauthorized,
    error_for_status,
)
from orchestrator.hosts.envmap import EnvMap
from orchestrator.hosts.parsers.compose_manager_reads import VersionInfo
from orchestrator.hosts.redaction import Redactor
from recorded_exchanges import EXCHANGE_LIST, Exchange

BASE = "http://cm.test:8080"
POLICY = immediate_retry(busy_retries=2, max_attempts=3, tag_not_found_retries=2)
NS_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}\+00:00$")


def recorded_response(ex: Exchange, request: httpx.Request) -> httpx.Response:
    headers = {"content-type": ex.content_type} if ex.content_type else {}
    if ex.media_type == "application/x-ndjson":
        content = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in ex.ndjson_events()).encode()
    elif ex.media_type == "application/json":
        # docker/ps, logs: the clipped `output` string is kept as far as it goes (its lines are checked)
        content = json.dumps(ex.json_body(keep_cut_string=ex.path in ("/docker/ps", "/compose/logs"))).encode()
        if ex.nonce and ex.status == 200:  # the server echoes the nonce it was sent
            content = content.replace(ex.nonce.encode(), request.url.params.get("nonce", "").encode())
    else:
        content = ex.body.encode()
    return httpx.Response(ex.status, headers=headers, content=content)


class Replay:
    """Answers every request with the recorded answer; counts what the client sent."""

    def __init__(self, ex: Exchange) -> None:
        self.ex = ex
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if (request.method, request.url.path) != (self.ex.method, self.ex.path.split("?")[0]):
            return httpx.Response(599, text=f"unexpected {request.method} {request.url.path}")
        return recorded_response(self.ex, request)


def client_for(replay: Replay) -> ComposeManagerClient:
    return ComposeManagerClient(BASE, "cm-token", transport=httpx.MockTransport(replay), retry=POLICY)


def request_of(ex: Exchange) -> tuple[ComposeRequest, EnvMap]:
    body = ex.request() or {}
    dry = body.get("dry_run")
    if dry is None:  # clipped before the flag: the answer says which it was
        dry = "DRY-RUN" in ex.body or "dry-run" in ex.step
    req = ComposeRequest(
        tag=body["tag"], file=body["file"], services=tuple(body.get("services") or ()),
        project=body.get("project"), dry_run=bool(dry) if ex.path == "/compose/up" else False,
    )
    env = EnvMap({k: v for k, v in (body.get("env") or {}).items()} or {"ENV": "prod"})
    return req, env


def mapped_error(ex: Exchange) -> Exception:
    """What `error_for_status` makes of the recorded answer (for requests our client never sends)."""
    return error_for_status("compose-manager", recorded_response(ex, httpx.Request(ex.method, BASE + ex.path)), Redactor())


async def check_version(ex: Exchange, cm: ComposeManagerClient, replay: Replay) -> None:
    info = await cm.version()
    raw = ex.json_body()
    assert isinstance(info, VersionInfo) and info["status"] == "ok" and info.image == raw["image"]
    assert dict(info.items()) == raw  # the old dict reading still works
    assert info.last_attempt.tag == raw.get("tag")
    work = info.project()
    projects = raw.get("projects", {}).get("work", {})
    assert (work.current.tag if work.current else None) == projects.get("current", {}).get("tag")
    assert (work.previous.tag if work.previous else None) == projects.get("previous", {}).get("tag")
    if "tag" not in raw:  # a fresh server: nothing attempted, nothing deployed
        assert info.last_attempt.tag is None and work.current is None and work.previous is None


async def check_ps(ex: Exchange, cm: ComposeManagerClient, replay: Replay) -> None:
    if ex.status == 401:
        with pytest.raises(Unauthorized, match="Invalid token"):
            await cm.ps()
        return
    if ex.method == "POST":  # 405: our client never POSTs docker/ps
        assert isinstance(mapped_error(ex), BadRequest)
        return
    output = ex.json_body(keep_cut_string=True)["output"]
    if ex.clipped:  # the output's first line is clipped too: complete it the same way
        from recorded_exchanges import complete_prefix

        first = complete_prefix(output.split("\n", 1)[0], keep_cut_string=True)
        replay.ex = Exchange(**{**ex.__dict__, "body": json.dumps({"status": "ok", "output": json.dumps(first)}), "total_chars": None})
    containers = await cm.ps()
    assert all(r.method == "GET" for r in replay.requests)
    if output == "":
        assert containers == []
    else:
        assert containers and all(c.project == "work" and c.service for c in containers)
        assert await cm.ps(project="glm") == []


async def check_attestation(ex: Exchange, cm: ComposeManagerClient, replay: Replay) -> None:
    if ex.status == 400:
        err = mapped_error(ex)
        assert isinstance(err, BadRequest) and "nonce must be hex-encoded" in str(err)
        return
    actions = await cm.action_log()
    assert actions[0].action == "compose_manager_started"
    assert all(NS_STAMP.match(a.timestamp or "") for a in actions)
    ups = [a for a in actions if a.action == "compose_up"]
    assert all(a.tag and a.commit and a.file for a in ups)
    assert re.fullmatch(r"[0-9a-f]{64}", replay.requests[-1].url.params["nonce"])


async def check_compose(ex: Exchange, cm: ComposeManagerClient, replay: Replay) -> None:
    body = ex.request() or {}
    if "tag" not in body:  # sent raw: the server's 422 text/plain, quoted
        err = mapped_error(ex)
        assert isinstance(err, BadRequest) and err.status == 422 and "missing field `tag`" in str(err)
        return
    req, env = request_of(ex)
    call = cm.up if ex.path == "/compose/up" else cm.down
    if body.get("project") == "work" or any(not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k) or "\n" in v for k, v in env.items()):
        with pytest.raises(RequestInvalid):  # refused before sending
            await call(req, env)
        assert replay.requests == []
        err = mapped_error(ex)
        assert isinstance(err, BadRequest) and err.detail.endswith(json.loads(ex.body)["error"])
        return
    if ex.status == 401:
        with pytest.raises(Unauthorized, match="Invalid token"):
            await call(req, env)
    elif ex.status == 409:
        with pytest.raises(Busy) as busy:
            await call(req, env)
        assert busy.value.in_flight == "compose_up" and len(replay.requests) == POLICY.busy_retries + 1
    elif ex.status == 400 and "tag not found" in ex.body:
        with pytest.raises(TagNotFound) as err:
            await call(req, env)
        assert "rate limit" in str(err.value) and len(replay.requests) == POLICY.tag_not_found_retries + 1
    elif ex.status == 400 and "tag too recent" in ex.body:
        with pytest.raises(TagTooRecent, match=r"2026-11-30 17:59:35 UTC is less than 48 hours old"):
            await call(req, env)
    elif ex.status == 400:
        with pytest.raises(BadRequest, match=re.escape(json.loads(ex.body)["error"])):
            await call(req, env)
    else:
        events = ex.ndjson_events()
        outcome = await call(req, env)
        assert outcome.lines == [e["data"] for e in events if e["event"] in ("stdout", "stderr")]
        done = next((e for e in events if e["event"] == "done"), None)
        if done is None:  # the recording clipped the stream before `done`
            assert outcome.status == "unknown"
        else:
            assert outcome.status == ("success" if done["success"] else "failure")
            assert outcome.exit_code == done["exit_code"]
        plan = next((e for e in events if e["event"] == "plan"), None)
        assert outcome.plan_event == plan
        if plan is not None:
            assert outcome.plan_event["plan"]["create"] == ["Container model-sg-glm53-w4afp8-tp4-r2"]


async def check_logs(ex: Exchange, cm: ComposeManagerClient, replay: Replay) -> None:
    body = ex.request()
    assert body is not None
    if body.get("project") not in (None, "work"):
        with pytest.raises(RequestInvalid, match="default project"):
            await cm.logs(body["file"], body["services"], body["tail"], body["project"])
        assert replay.requests == []
    if ex.status == 500:
        with pytest.raises(ComposeFailed, match="no such service: no-such-svc") as err:
            await cm.logs(body["file"], body["services"], body["tail"])
        assert err.value.stderr == "no such service: no-such-svc"
        assert len(replay.requests) == 1  # deterministic: never retried
        return
    out = await cm.logs(body["file"], body["services"], body["tail"])
    sent = json.loads(replay.requests[-1].content)
    assert "project" not in sent
    assert out and all(line.startswith(f"{body['services'][0]}  | ") for line in out.splitlines())


async def check_status(ex: Exchange, cm: ComposeManagerClient, replay: Replay) -> None:
    in_flight = await cm.status()
    raw = json.loads(ex.body)["in_flight"]
    assert in_flight is not None
    assert (in_flight.action, in_flight.tag, in_flight.file, list(in_flight.services)) == (
        raw["action"], raw["tag"], raw["file"], raw["services"]
    )
    assert NS_STAMP.match(in_flight.started_at or "")


CHECKS: dict[str, Callable] = {
    "/version": check_version,
    "/docker/ps": check_ps,
    "/v1/attestation/report": check_attestation,
    "/compose/up": check_compose,
    "/compose/down": check_compose,
    "/compose/logs": check_logs,
    "/status": check_status,
}


def test_every_recorded_route_has_a_check() -> None:
    assert {ex.path.split("?")[0] for ex in EXCHANGE_LIST} == set(CHECKS)
    assert len(EXCHANGE_LIST) == 49


@pytest.mark.parametrize("ex", EXCHANGE_LIST, ids=lambda ex: f"{ex.index:02d}-{ex.step}")
async def test_client_reads_the_real_answer(ex: Exchange) -> None:
    replay = Replay(ex)
    async with client_for(replay) as cm:
        await CHECKS[ex.path.split("?")[0]](ex, cm, replay)
