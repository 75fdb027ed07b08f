import asyncio
import json

import httpx
import pytest
import respx

from orchestrator.hosts.clients.errors import RequestInvalid, ServerError
from orchestrator.hosts.clients.inference import InferenceClient, SoakRelayClient
from orchestrator.hosts.redaction import Redactor

LONG = "https://glm-5-3-flash-long.completions.test"
RELAY = "http://10.0.0.2:8009"
MODEL = "z-ai/glm-5.3-flash"
TOKEN = "inference-token-0987654321"


def completion(text="blue", prompt=2100, cached=None, reasoning=None):
    usage = {"prompt_tokens": prompt, "completion_tokens": 3, "total_tokens": prompt + 3}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    message = {"role": "assistant", "content": text}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return httpx.Response(200, json={"id": "c", "choices": [{"index": 0, "message": message}], "usage": usage})


async def test_completion_parses_usage_and_sends_temperature_zero():
    with respx.mock(base_url=LONG) as r:
        route = r.post("/v1/chat/completions").mock(return_value=completion("hi", 40, 32))
        async with InferenceClient(LONG + "/v1", TOKEN) as client:
            result = await client.completion(MODEL, [{"role": "user", "content": "hello"}], max_tokens=8)
        body = json.loads(route.calls.last.request.content)
    assert (result.text, result.prompt_tokens, result.cached_tokens) == ("hi", 40, 32)
    assert body["temperature"] == 0 and body["max_tokens"] == 8 and body["model"] == MODEL
    assert route.calls.last.request.headers["authorization"] == f"Bearer {TOKEN}"


async def test_completion_with_only_reasoning_content_and_errors_raise():
    with respx.mock(base_url=LONG) as r:
        r.post("/v1/chat/completions").mock(side_effect=[completion(None, reasoning="thinking..."), httpx.Response(500, json={"error": "boom"})])
        async with InferenceClient(LONG, TOKEN) as client:
            assert (await client.completion(MODEL, [{"role": "user", "content": "x"}])).text == "thinking..."
            with pytest.raises(ServerError):
                await client.completion(MODEL, [{"role": "user", "content": "x"}])


async def test_bad_arguments_raise_request_invalid():
    async with InferenceClient(LONG, TOKEN) as client:
        with pytest.raises(RequestInvalid):
            await client.completion("", [{"role": "user", "content": "x"}])
        with pytest.raises(RequestInvalid):
            await client.cache_hit_check("")


async def test_cache_hit_check_ok_and_the_follow_up_repeats_the_first_turn():
    with respx.mock(base_url=LONG) as r:
        route = r.post("/v1/chat/completions").mock(side_effect=[completion("blue", 2100, 0), completion("green", 2120, 2048)])
        async with InferenceClient(LONG, TOKEN) as client:
            result = await client.cache_hit_check(MODEL)
        first, second = (json.loads(call.request.content)["messages"] for call in route.calls)
    assert result.ok and result.reason == "follow-up reused 2048 of 2120 prompt tokens"
    assert second[: len(first)] == first
    assert second[len(first)] == {"role": "assistant", "content": "blue"}
    assert len(first[0]["content"]) > 4000  # a long-ish shared prefix


@pytest.mark.parametrize(
    "responses, reason",
    [
        ([completion("blue", 2100, 0), completion("green", 2120, 0)], "0 cached"),
        ([completion("blue", 2100), completion("green", 2120)], "no prompt_tokens_details"),
        ([httpx.Response(502, text="<html>bad gateway</html>")], "first turn failed"),
        ([completion("blue", 2100, 0), httpx.ConnectError("refused")], "follow-up failed"),
    ],
)
async def test_cache_hit_check_failures_are_results(responses, reason):
    with respx.mock(base_url=LONG) as r:
        r.post("/v1/chat/completions").mock(side_effect=responses)
        async with InferenceClient(LONG, TOKEN) as client:
            result = await client.cache_hit_check(MODEL)
    assert not result.ok and reason in result.reason


async def test_hard_timeout_becomes_a_failed_check():
    async def slow(request):
        await asyncio.sleep(5)
        return completion()

    with respx.mock(base_url=LONG, assert_all_called=False) as r:  # cancelled calls are not recorded
        r.post("/v1/chat/completions").mock(side_effect=slow)
        async with InferenceClient(LONG, TOKEN, timeout_s=0.05) as client:
            result = await client.cache_hit_check(MODEL)
    assert not result.ok and "no answer within" in result.reason


def relay_routes(r, *, health=200, models=(MODEL,), text="ready"):
    r.get("/health").mock(return_value=httpx.Response(health, text="ok"))
    r.get("/v1/models").mock(return_value=httpx.Response(200, json={"object": "list", "data": [{"id": m} for m in models]}))
    return r.post("/v1/chat/completions").mock(return_value=completion(text, 12))


async def test_relay_direct_checks_pass():
    with respx.mock(base_url=RELAY) as r:
        gen = relay_routes(r)
        async with SoakRelayClient(RELAY, TOKEN) as relay:
            result = await relay.direct_checks(MODEL)
        assert json.loads(gen.calls.last.request.content)["temperature"] == 0
    assert result.ok and result.reason == "all direct checks passed"


@pytest.mark.parametrize(
    "kwargs, reason",
    [
        (dict(health=503), "/health"),
        (dict(models=("other/model",)), "does not list"),
        (dict(text=""), "empty output"),
    ],
)
async def test_relay_direct_check_failures(kwargs, reason):
    with respx.mock(base_url=RELAY) as r:
        relay_routes(r, **kwargs)
        async with SoakRelayClient(RELAY, TOKEN) as relay:
            result = await relay.direct_checks(MODEL)
    assert not result.ok and reason in result.reason
    assert ("/health" in result.reason) == (kwargs.get("health", 200) != 200)


async def test_completion_text_is_scrubbed_with_the_shared_redactor():
    with respx.mock(base_url=LONG) as r:
        r.post("/v1/chat/completions").mock(return_value=completion("served by cvm-gpu02-label today", 10, 0))
        async with InferenceClient(LONG, TOKEN, redactor=Redactor("cvm-gpu02-label")) as client:
            result = await client.completion(MODEL, [{"role": "user", "content": "x"}])
    assert result.text == "served by *** today"

