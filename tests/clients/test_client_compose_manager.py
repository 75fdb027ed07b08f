import json
from pathlib import Path

import httpx
import pytest
import respx

from helpers_compose import BASE, ENV, FAST, HTML_502, NEW_FILE, R2, REQ, TOKEN, done_line, error, event_line, stream
from orchestrator.hosts.clients.compose_manager import ComposeManagerClient, ComposeRequest
from orchestrator.hosts.clients.errors import (
    BadRequest,
    Busy,
    MalformedResponse,
    RequestInvalid,
    ServerError,
    TagTooRecent,
    TransportError,
    Unauthorized,
)
from orchestrator.hosts.envmap import EnvMap
from orchestrator.hosts.parsers.action_log import last_deploy
from orchestrator.hosts.parsers.dry_run import parse_dry_run

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "reference" / "samples"


@pytest.fixture
def router():
    with respx.mock(base_url=BASE, assert_all_called=False) as r:
        yield r


@pytest.fixture
async def client(router):
    async with ComposeManagerClient(BASE, TOKEN, retry=FAST) as c:
        yield c


async def test_up_streams_events_in_order_and_sends_the_whole_env(router, client):
    route = router.post("/compose/up").mock(
        return_value=stream(event_line("stderr", " Container x  Recreated"), event_line("stdout", "ok"), done_line(True, 0))
    )
    outcome = await client.up(REQ, ENV)
    assert outcome.status == "success" and outcome.exit_code == 0
    assert outcome.lines == [" Container x  Recreated", "ok"]
    request = route.calls.last.request
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    assert json.loads(request.content) == {
        "tag": REQ.tag, "file": NEW_FILE, "services": [R2], "env": ENV.as_body(), "force_recreate": False, "dry_run": False,
    }


async def test_down_body_has_no_force_recreate_or_dry_run(router, client):
    route = router.post("/compose/down").mock(return_value=stream(done_line()))
    down = ComposeRequest(tag="old-tag", file="prod/old.yaml", services=("model-sg-glm53-fp8-tp4-r2",), project="glm")
    assert (await client.down(down, ENV)).status == "success"
    assert json.loads(route.calls.last.request.content) == {
        "tag": "old-tag", "file": "prod/old.yaml", "project": "glm", "services": ["model-sg-glm53-fp8-tp4-r2"], "env": ENV.as_body(),
    }


async def test_down_refuses_a_dry_run_because_the_server_would_act(router, client):
    route = router.post("/compose/down").mock(return_value=stream(done_line()))
    with pytest.raises(RequestInvalid) as err:
        await client.down(REQ.as_dry_run(), ENV)
    assert err.value.field == "dry_run" and not route.called


async def test_failure_outcome_names_exit_code_and_last_line(router, client):
    router.post("/compose/up").mock(return_value=stream(event_line("stderr", "Error response from daemon: boom"), done_line(False, 1)))
    outcome = await client.up(REQ, ENV)
    assert outcome.status == "failure" and outcome.exit_code == 1
    assert "exit code 1" in outcome.error and "boom" in outcome.error


@pytest.mark.parametrize(
    "response",
    [
        pytest.param(lambda: stream(event_line("stderr", "pulling")), id="ends-without-done"),
        pytest.param(lambda: stream(event_line("stderr", "pulling"), b'{"event":"std', exc=httpx.ReadError("connection reset")), id="reset"),
        pytest.param(lambda: stream(event_line("stderr", "pulling"), exc=httpx.ReadTimeout("idle")), id="read-timeout"),
        pytest.param(lambda: stream(event_line("stderr", "a"), b'{"event":"stderr","da', exc=httpx.RemoteProtocolError("incomplete")), id="cut-chunk"),
    ],
)
async def test_stream_cut_midway_is_unknown_never_raised(router, client, response):
    router.post("/compose/up").mock(return_value=response())
    outcome = await client.up(REQ, ENV)
    assert outcome.status == "unknown" and outcome.exit_code is None
    assert outcome.lines[0] in ("pulling", "a")
    assert outcome.error


async def test_malformed_ndjson_line_mid_stream_is_unknown_even_with_done(router, client):
    router.post("/compose/up").mock(return_value=stream(event_line("stderr", "a"), b"<html>proxy hiccup</html>\n", event_line("stderr", "b"), done_line(True, 0)))
    outcome = await client.up(REQ, ENV)
    assert outcome.status == "unknown"
    assert "malformed NDJSON line 2" in outcome.error and "proxy hiccup" not in outcome.error
    assert outcome.lines == ["a", "b"] and outcome.exit_code == 0  # the done event was read


async def test_inconsistent_done_is_unknown(router, client):
    router.post("/compose/up").mock(return_value=stream(done_line(True, 3)))
    assert (await client.up(REQ, ENV)).status == "unknown"


async def test_done_line_without_trailing_newline_is_accepted(router, client):
    router.post("/compose/up").mock(return_value=stream(event_line("stderr", "x"), done_line().rstrip(b"\n")))
    assert (await client.up(REQ, ENV)).status == "success"


async def test_html_502_before_the_stream_is_a_server_error_not_retried(router, client):
    route = router.post("/compose/up").mock(return_value=HTML_502)
    with pytest.raises(ServerError) as err:
        await client.up(REQ, ENV)
    assert err.value.status == 502 and "text/html" in err.value.detail and "<html>" not in str(err.value)
    assert route.call_count == 1  # the server may have acted: never retried


async def test_html_502_on_a_read_is_retried(router, client):
    route = router.get("/docker/ps").mock(side_effect=[HTML_502, httpx.Response(200, json={"status": "ok", "output": ""})])
    assert await client.ps() == []
    assert route.call_count == 2


async def test_html_200_on_a_read_is_malformed(router, client):
    router.get("/version").mock(return_value=httpx.Response(200, text="<html>login</html>", headers={"content-type": "text/html"}))
    with pytest.raises(MalformedResponse) as err:
        await client.version()
    assert "text/html" in str(err.value) and "login" not in str(err.value)


async def test_409_then_success(router, client):
    route = router.post("/compose/up").mock(
        side_effect=[error(409, "another docker operation is already in progress: compose_up"), stream(done_line())]
    )
    assert (await client.up(REQ, ENV)).status == "success"
    assert route.call_count == 2


async def test_409_forever_raises_busy_after_bounded_retries(router, client):
    route = router.post("/compose/up").mock(return_value=error(409, "another docker operation is already in progress: compose_down"))
    with pytest.raises(Busy) as err:
        await client.up(REQ, ENV)
    assert err.value.in_flight == "compose_down"
    assert route.call_count == FAST.busy_retries + 1


@pytest.mark.parametrize(
    "status, message, exc_type",
    [
        (400, "tag too recent: 2026-09-23T19:35:08Z is less than 48 hours old", TagTooRecent),
        (400, "invalid env key", BadRequest),
        (422, "unprocessable", BadRequest),
        (401, "unauthorized", Unauthorized),
        (403, "forbidden", Unauthorized),
    ],
)
async def test_refusals_raise_the_taxonomy_error_without_retry(router, client, status, message, exc_type):
    route = router.post("/compose/up").mock(return_value=error(status, message))
    with pytest.raises(exc_type) as err:
        await client.up(REQ, ENV)
    assert err.value.system == "compose-manager"
    assert message in str(err.value)
    assert route.call_count == 1
    # a refused token names the setting to fix
    assert ("ORCHESTRATOR_COMPOSE_MANAGER_TOKEN" in str(err.value)) == (exc_type is Unauthorized)


async def test_connect_error_is_retried_then_succeeds(router, client):
    route = router.post("/compose/up").mock(side_effect=[httpx.ConnectError("refused"), stream(done_line())])
    assert (await client.up(REQ, ENV)).status == "success"
    assert route.call_count == 2


async def test_connect_error_forever_raises_transport_error(router, client):
    route = router.post("/compose/up").mock(side_effect=httpx.ConnectError("refused"))
    with pytest.raises(TransportError) as err:
        await client.up(REQ, ENV)
    assert err.value.request_sent is False
    assert route.call_count == FAST.max_attempts


async def test_timeout_waiting_for_headers_after_sending_is_unknown_not_retried(router, client):
    route = router.post("/compose/up").mock(side_effect=httpx.ReadTimeout("no answer"))
    outcome = await client.up(REQ, ENV)
    assert outcome.status == "unknown" and "ReadTimeout" in outcome.error
    assert route.call_count == 1


async def test_reads_retry_transport_errors(router, client):
    route = router.get("/version").mock(
        side_effect=[httpx.ReadError("reset"), httpx.Response(200, json={"status": "ok", "tag": "t", "commit": "c", "file": "f", "file_sha256": "s"})]
    )
    assert (await client.version())["tag"] == "t"
    assert route.call_count == 2


async def test_ps_parses_and_finds_zombies(router, client):
    output = "\n".join(
        json.dumps({"ID": i, "Names": n, "Image": "img", "State": s, "Status": st, "CreatedAt": "2026-09-23",
                    "Labels": f"com.docker.compose.service={n},com.docker.compose.project=work"})
        for i, n, s, st in [("1", "nginx", "running", "Up 2 hours"), ("2", "model-sg-glm53-fp8-tp4-r2", "removing", "Removal In Progress"),
                            ("3", "dcgm-glm53", "dead", "Dead")]
    )
    router.get("/docker/ps").mock(return_value=httpx.Response(200, json={"status": "ok", "output": output}))
    containers = await client.ps()
    assert [c.name for c in containers if c.state in ("removing", "dead")] == ["model-sg-glm53-fp8-tp4-r2", "dcgm-glm53"]
    assert len(await client.ps(project="work")) == 3


async def test_ps_bad_output_is_malformed(router, client):
    router.get("/docker/ps").mock(return_value=httpx.Response(200, json={"status": "ok", "output": "not json"}))
    with pytest.raises(MalformedResponse):
        await client.ps()


async def test_logs_body_and_output(router, client):
    route = router.post("/compose/logs").mock(return_value=httpx.Response(200, json={"status": "ok", "output": f"{R2}  | ready\n"}))
    assert await client.logs(NEW_FILE, [R2], 50) == f"{R2}  | ready\n"
    assert json.loads(route.calls.last.request.content) == {"file": NEW_FILE, "services": [R2], "tail": 50}
    with pytest.raises(RequestInvalid):
        await client.logs(NEW_FILE, [R2], -1)
    with pytest.raises(RequestInvalid):
        await client.logs("../etc/passwd", [R2], 10)


async def test_action_log_uses_a_fresh_nonce_and_applies_last_deploy(router, client):
    def answer(request):
        nonce = request.url.params["nonce"]
        actions = [
            {"timestamp": "t1", "action": "compose_up", "tag": "old", "commit": "c", "file": "prod/canary.yaml", "file_sha256": "s"},
            {"timestamp": "t2", "action": "compose_up", "tag": "new", "commit": "c", "file": NEW_FILE, "file_sha256": "s", "services": [R2]},
        ]
        return httpx.Response(200, json={"actions": actions, "actions_hash": "h", "nonce": nonce, "quote": "q"})

    route = router.get("/v1/attestation/report").mock(side_effect=answer)
    actions = await client.action_log()
    nonce = route.calls.last.request.url.params["nonce"]
    assert len(nonce) == 64 and int(nonce, 16) >= 0
    assert last_deploy(actions, R2).tag == "new"
    assert last_deploy(actions, "model-sg-glm53-w4afp8-tp4-r1").tag == "old"
    await client.action_log()
    assert route.calls[-1].request.url.params["nonce"] != nonce


async def test_action_log_with_another_nonce_is_refused(router, client):
    router.get("/v1/attestation/report").mock(return_value=httpx.Response(200, json={"actions": [], "nonce": "ab" * 32}))
    with pytest.raises(MalformedResponse):
        await client.action_log()


async def test_real_dry_run_sample_through_the_stream(router, client):
    path = SAMPLES / "compose-dry-run.txt"
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    router.post("/compose/up").mock(return_value=stream(*[event_line("stderr", line) for line in lines], done_line()))
    outcome = await client.up(REQ.as_dry_run(), ENV)
    assert outcome.status == "success" and outcome.lines == lines
    plan = parse_dry_run(outcome.lines, project="nginx-golang-mysql")
    assert plan.unknown_lines == [] and "removed" in plan.actions.values()


# ------------------------------------------------------------------ request validation


@pytest.mark.parametrize(
    "changes, field",
    [
        (dict(services=()), "services"),
        (dict(services=("",)), "services"),
        (dict(services=("ok", "  ")), "services"),
        (dict(services="nginx"), "services"),
        (dict(file=""), "file"),
        (dict(file="/etc/compose.yaml"), "file"),
        (dict(file="prod/../secrets.yaml"), "file"),
        (dict(file=".."), "file"),
        (dict(tag=""), "tag"),
        (dict(tag="v1 v2"), "tag"),
        (dict(project="Bad Project"), "project"),
        (dict(force_recreate=True), "force_recreate"),
    ],
)
async def test_each_bad_field_is_refused_before_sending(router, client, changes, field):
    route = router.post("/compose/up").mock(return_value=stream(done_line()))
    fields = dict(tag=REQ.tag, file=REQ.file, services=REQ.services)
    fields.update(changes)
    req = ComposeRequest(**fields)
    with pytest.raises(RequestInvalid) as err:
        await client.up(req, ENV)
    assert err.value.field == field and field in str(err.value)
    assert isinstance(err.value, ValueError)
    assert not route.called


async def test_force_recreate_is_allowed_only_when_the_step_allows_it(router, client):
    route = router.post("/compose/up").mock(return_value=stream(done_line()))
    req = ComposeRequest(tag="t", file=NEW_FILE, services=(R2,), force_recreate=True, allow_force_recreate=True)
    assert (await client.up(req, ENV)).status == "success"
    assert json.loads(route.calls.last.request.content)["force_recreate"] is True


@pytest.mark.parametrize(
    "env, needle",
    [
        (EnvMap({"BAD-KEY": "x"}), "BAD-KEY"),
        (EnvMap({"1START": "x"}), "1START"),
        (EnvMap({"MULTI": "line-one-secret\nline-two-secret"}), "MULTI"),
        (EnvMap({"CR": "carriage-secret\rx"}), "CR"),
        (EnvMap({}), "empty"),
    ],
)
async def test_bad_env_is_refused_naming_the_key_never_the_value(router, client, env, needle):
    route = router.post("/compose/up").mock(return_value=stream(done_line()))
    with pytest.raises(RequestInvalid) as err:
        await client.up(REQ, env)
    assert err.value.field == "env" and needle in str(err.value)
    for value in env.values():
        for part in value.splitlines():
            assert part not in str(err.value)
    assert not route.called


async def test_env_must_be_an_envmap(router, client):
    with pytest.raises(RequestInvalid):
        await client.up(REQ, {"A": "b"})  # type: ignore[arg-type]


def test_request_helpers():
    req = ComposeRequest(tag="t", file=NEW_FILE, services=(R2,), project="work")
    dry = req.as_dry_run()
    assert dry.dry_run and not req.dry_run
    assert req.redacted(len(ENV)) == {
        "tag": "t", "file": NEW_FILE, "project": "work", "services": [R2], "env": f"<env map: {len(ENV)} keys>",
        "force_recreate": False, "dry_run": False,
    }
    assert req.redacted(action="down") == {"tag": "t", "file": NEW_FILE, "project": "work", "services": [R2], "env": "<env map>"}
    assert req.body(ENV)["env"] == ENV.as_body()


def test_empty_token_is_refused():
    with pytest.raises(RequestInvalid):
        ComposeManagerClient(BASE, "")


async def test_logs_are_raw_text_for_the_gates(router, client):
    # the gates judge what the engine wrote; whoever shows a line scrubs it (Voice.scrub_lines)
    client.redactor.add("hf_Q8vR2mK7pX4nT9wL")
    line = f"{R2}  | token hf_Q8vR2mK7pX4nT9wL loaded rank_budget_bytes=108984795136\n"
    router.post("/compose/logs").mock(return_value=httpx.Response(200, json={"status": "ok", "output": line}))
    assert await client.logs(NEW_FILE, [R2], 10) == line

