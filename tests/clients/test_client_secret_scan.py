"""Every error path, run with a known token and an env map of secret values: no token and no env
value the redaction policy hides (EnvMap.redaction_values: credentials by key name, and long
values) may appear in an exception message,
an outcome, an event handed to the caller, or a captured log line."""

import base64
import json
import logging
import re
from urllib.parse import quote

import httpx
import pytest
import respx
from structlog.testing import capture_logs

from helpers_compose import BASE, ENV, FAST, REQ, TOKEN, ChunkStream, done_line, event_line
from orchestrator.hosts.clients.compose_manager import ComposeManagerClient, ComposeRequest
from orchestrator.hosts.clients.dashboard import DashboardClient
from orchestrator.hosts.clients.errors import ClientError
from orchestrator.hosts.clients.inference import InferenceClient, SoakRelayClient
from orchestrator.hosts.clients.model_proxy import ModelProxyClient
from orchestrator.hosts.envmap import EnvMap
from orchestrator.hosts.redaction import Redactor

SECRETS = [TOKEN] + sorted(ENV.redaction_values())
assert len(SECRETS) >= 2, 'the fixture env map must hold a credential'
ECHO = f"you sent token {TOKEN} and env {json.dumps(ENV.as_body())} / " + " ".join(ENV.values())
DASH, DASH_TOKEN = "http://dash.test", "dash-token-secret-777"
PEER, PEER_TOKEN = "http://mp.test", "peer-token-secret-888"
INFER, INFER_TOKEN = "http://infer.test", "infer-token-secret-555"
ALL_SECRETS = SECRETS + [DASH_TOKEN, PEER_TOKEN, INFER_TOKEN, "host-bearer-token-999"]
# A value echoed JSON-escaped is leaked just the same.
ALL_SECRETS += sorted({json.dumps(s)[1:-1] for s in ALL_SECRETS} - set(ALL_SECRETS))


def err(status, text=ECHO):
    return httpx.Response(status, json={"status": "error", "error": text})


def leaking_stream():
    return httpx.Response(200, stream=ChunkStream(
        [event_line("stderr", f"env was {line}") for line in ENV.values()] + [b"not json " + TOKEN.encode() + b"\n", done_line(False, 2)],
    ))


def cut_stream():
    return httpx.Response(200, stream=ChunkStream([event_line("stderr", ECHO)], httpx.ReadError(f"reset while sending {TOKEN}")))


COMPOSE_UP_ANSWERS = {
    "400-echo": err(400),
    "tag-too-recent": err(400, "tag too recent: " + ECHO),
    "tag-not-found": err(400, "tag not found: " + ECHO),
    "401": err(401),
    "409-forever": err(409, "another docker operation is already in progress: " + ECHO),
    "502-json": err(502),
    "500-text": httpx.Response(500, text=ECHO),
    "stream-leaks": leaking_stream,
    "stream-cut": cut_stream,
    "connect-error": httpx.ConnectError(f"cannot connect with {TOKEN}"),
    "read-timeout": httpx.ReadTimeout(f"timeout {ENV['PROXY_TOKEN']}"),
}


def collect(texts, value):
    if isinstance(value, BaseException):
        texts += [str(value), repr(value), *map(str, value.args)]
        if isinstance(value, ClientError):
            texts += [value.detail, str(getattr(value, "in_flight", ""))]
    else:
        texts.append(repr(value))


def assert_clean(texts, logs, caplog):
    corpus = list(texts) + [repr(entry) for entry in logs] + [caplog.text]
    for text in corpus:
        for secret in ALL_SECRETS:
            assert secret not in text, f"secret leaked into: {text[:300]}"


@pytest.mark.parametrize("case", sorted(COMPOSE_UP_ANSWERS))
async def test_compose_up_error_paths_leak_nothing(case, caplog):
    caplog.set_level(logging.DEBUG)
    answer = COMPOSE_UP_ANSWERS[case]
    texts: list[str] = []
    with capture_logs() as logs, respx.mock(base_url=BASE) as router:
        route = router.post("/compose/up")
        if isinstance(answer, Exception):
            route.mock(side_effect=answer)
        else:
            route.mock(side_effect=lambda request: answer() if callable(answer) else answer)
        async with ComposeManagerClient(BASE, TOKEN, retry=FAST) as client:
            try:
                outcome = await client.up(REQ, ENV)
                texts += [repr(outcome), str(outcome.error)] + outcome.lines
            except ClientError as exc:
                collect(texts, exc)
    assert texts
    assert_clean(texts, logs, caplog)


async def test_compose_reads_and_validation_leak_nothing(caplog):
    caplog.set_level(logging.DEBUG)
    texts: list[str] = []
    with capture_logs() as logs, respx.mock(base_url=BASE, assert_all_called=False) as router:
        router.post("/compose/logs").mock(return_value=httpx.Response(200, json={"status": "ok", "output": ECHO}))
        router.get("/docker/ps").mock(return_value=err(503))
        router.get("/version").mock(return_value=err(404))
        router.get("/v1/attestation/report").mock(return_value=httpx.Response(200, json={"status": "error", "error": ECHO}))
        router.post("/compose/down").mock(return_value=leaking_stream())
        async with ComposeManagerClient(BASE, TOKEN, retry=FAST) as client:
            client.redactor.add(*ENV.redaction_values())  # what any up/down of this host does first
            # raw, for the gates to judge (its callers scrub what they show); the client logs none of it
            assert await client.logs(REQ.file, list(REQ.services), 10) == ECHO
            for call in (client.ps, client.version, client.action_log):
                try:
                    await call()
                except ClientError as exc:
                    collect(texts, exc)
            outcome = await client.down(REQ, ENV)
            texts += [repr(outcome)] + outcome.lines
            bad_envs = [
                EnvMap({**ENV.as_body(), "PROXY_TOKEN": ENV["PROXY_TOKEN"] + "\n" + ENV["HOST_IP"]}),
                EnvMap({"BAD KEY": ENV["PROXY_TOKEN"]}),
            ]
            for bad in bad_envs:
                try:
                    await client.up(REQ, bad)
                except ClientError as exc:
                    collect(texts, exc)
            try:
                await client.up(ComposeRequest(tag=REQ.tag, file="../" + ENV["CVM_NAME"], services=REQ.services), ENV)
            except ClientError as exc:
                collect(texts, exc)
    assert len(texts) >= 6
    assert_clean(texts, logs, caplog)


async def test_dashboard_model_proxy_and_inference_error_paths_leak_nothing(caplog):
    """One shared Redactor (the documented use): the env values enter it when the dashboard is
    read, and every later client scrubs them too."""
    caplog.set_level(logging.DEBUG)
    texts: list[str] = []
    shared = Redactor()
    env_echo = f"env {json.dumps(ENV.as_body())} / " + " ".join(ENV.values())
    instance_env = {**ENV.as_body(), "PORT": 8000}
    with capture_logs() as logs:
        with respx.mock(base_url=DASH) as router:
            router.get("/api/instances").mock(side_effect=[
                err(400, f"bad bearer {DASH_TOKEN}"),
                httpx.Response(200, json=[{"id": 1, "name": "gpu02", "url": "u", "bearer_token": "host-bearer-token-999", "env_vars": instance_env}]),
                *[httpx.Response(200, json=[{"id": 1, "name": "gpu02", "url": "u", "bearer_token": "host-bearer-token-999",
                                             "env_vars": ENV.as_body()}]) for _ in range(2)],
            ])
            async with DashboardClient(DASH, DASH_TOKEN, retry=FAST, redactor=shared) as dash:
                for call in (dash.list_instances, dash.list_instances):
                    try:
                        await call()
                    except ClientError as exc:
                        collect(texts, exc)
                env = await dash.env_map(name="gpu02")
                (instance,) = await dash.list_instances()
                texts += [repr(instance), str(instance), repr(instance.env), repr(env)]
        with respx.mock(base_url=PEER) as router:
            router.get("/backends/list").mock(return_value=err(401, f"bad {PEER_TOKEN} {env_echo}"))
            async with ModelProxyClient("peer-1", PEER, PEER_TOKEN, retry=FAST, redactor=shared) as mp:
                try:
                    await mp.presence("10.0.0.2:8001", "glm.test")
                except ClientError as exc:
                    collect(texts, exc)
        with respx.mock(base_url=INFER, assert_all_called=False) as router:
            router.post("/v1/chat/completions").mock(return_value=err(400, f"{INFER_TOKEN} {env_echo}"))
            router.get("/health").mock(return_value=err(500, f"{INFER_TOKEN} {env_echo}"))
            router.get("/v1/models").mock(return_value=httpx.Response(200, json={"data": [{"id": INFER_TOKEN}]}))
            async with InferenceClient(INFER, INFER_TOKEN, redactor=shared) as inference:
                result = await inference.cache_hit_check("z-ai/glm-5.3-flash")
                texts += [result.reason, repr(result)]
            async with SoakRelayClient(INFER, INFER_TOKEN, redactor=shared) as relay:
                relay_result = await relay.direct_checks("z-ai/glm-5.3-flash")
                texts += [relay_result.reason, repr(relay_result)]
    assert not result.ok and not relay_result.ok
    assert_clean(texts, logs, caplog)



RESERVED = "pw/Zq9+x&y=z?\u00fc-secret"  # a secret URL encoding changes (a configured token, say)


def _forms(secret: str) -> dict[str, str]:
    """A secret as an echo may carry it: base64, base64url, a Basic header's `user:secret`,
    percent-encoded in either case, split across two lines."""
    half = len(secret) // 2
    pct = quote(secret, safe="")
    return {
        "base64": base64.b64encode(secret.encode()).decode(),
        "base64url": base64.urlsafe_b64encode(secret.encode()).decode(),
        "basic": "Basic " + base64.b64encode(f"orchestrator:{secret}".encode()).decode(),
        "pct-upper": pct,
        "pct-lower": re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), pct),
        "split": f"{secret[:half]}\n{secret[half:]}",
    }


def _leaked(secret: str, form: str) -> list[str]:
    """What must not be seen: the encoded form, or for a split both halves."""
    shown = _forms(secret)[form]
    if form == "split":
        return [secret[: len(secret) // 2], secret[len(secret) // 2:]]
    return [shown.removeprefix("Basic ")]


@pytest.mark.parametrize("form", sorted(_forms("x" * 8)))
@pytest.mark.parametrize("where", ["error-json", "error-text", "logs"])
async def test_encoded_and_split_secrets_leak_nothing(form, where, caplog):
    """Every secret the client knows, echoed back encoded or split over two lines, comes out
    masked (and the echo is seen: the scan is not vacuous)."""
    caplog.set_level(logging.DEBUG)
    secrets = [TOKEN, *sorted(ENV.redaction_values()), RESERVED]
    echo = "\n".join(f"seen [{_forms(s)[form]}] here" for s in secrets)
    texts: list[str] = []
    with capture_logs() as logs, respx.mock(base_url=BASE, assert_all_called=False) as router:
        answer = {"error-json": err(400, echo), "error-text": httpx.Response(400, text=echo),
                  "logs": httpx.Response(200, json={"status": "ok", "output": echo})}[where]
        router.post("/compose/up").mock(return_value=answer)
        router.post("/compose/logs").mock(return_value=answer)
        async with ComposeManagerClient(BASE, TOKEN, retry=FAST) as client:
            client.redactor.add(*ENV.redaction_values(), RESERVED)
            if where == "logs":
                # raw, for the gates to judge; shown as the run shows a window (Voice.scrub_lines)
                raw = await client.logs(REQ.file, list(REQ.services), 10)
                assert raw == echo
                texts += client.redactor.scrub_lines(raw.splitlines())
            else:
                try:
                    outcome = await client.up(REQ, ENV)
                    texts += [repr(outcome), str(outcome.error)]
                except ClientError as exc:
                    collect(texts, exc)
    assert sum(t.count("seen [") for t in texts) >= len(secrets)
    assert _forms(RESERVED)[form] != RESERVED
    assert any("***" in t for t in texts)
    corpus = texts + [repr(entry) for entry in logs] + [caplog.text]
    for secret in secrets:
        for piece in _leaked(secret, form):
            assert not any(piece in text for text in corpus), (secret, form, piece)
