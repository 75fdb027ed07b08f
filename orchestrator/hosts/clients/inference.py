"""Clients for the OpenAI-compatible endpoints (interfaces.md section 4): `InferenceClient` (a
domain's completions and cache-hit check) and `SoakRelayClient` (one replica's soak relay).

Every call has a hard deadline (`timeout_s`, by `asyncio.timeout` over httpx's per-operation
timeouts) and no retry: a check reports what it saw. A failed check is `ok=False` with a scrubbed
`reason`, never an exception (only `RequestInvalid` for bad arguments).
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass
from typing import Any

import structlog

from orchestrator.hosts.clients.errors import (
    ClientError,
    MalformedResponse,
    RequestInvalid,
    TransportError,
    parse_json,
)
from orchestrator.hosts.clients.http_session import HttpSession

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int | None
    cached_tokens: int | None  # None: the answer carries no cache report


@dataclass(frozen=True)
class CheckResult:
    """A check's verdict (`cache_hit_check`, `direct_checks`): `reason` says what passed or failed, scrubbed."""

    ok: bool
    reason: str


def cache_check_prefix(nonce: str, lines: int = 96) -> str:
    """A long-ish fixed system prompt (~2-3k tokens). The nonce at the start makes the first turn
    a guaranteed cache miss, so a hit on the second turn is caused by the first."""
    body = "\n".join(
        f"Reference note {i:03d}: the orchestrator verifies a long-context replica by sending a "
        f"completion and a follow-up that repeats this exact prefix, so cached prefix tokens are reported."
        for i in range(1, lines + 1)
    )
    return f"Check {nonce}. Read the notes below, then answer briefly.\n{body}"


def _validate_model(model: Any) -> None:
    if not isinstance(model, str) or not model.strip():
        raise RequestInvalid("inference", "model: must be a non-empty model id", field="model")


def parse_completion(payload: Any, system: str) -> Completion:
    if not isinstance(payload, dict):
        raise MalformedResponse(system, "completion answer is not an object")
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise MalformedResponse(system, "completion answer has no choices")
    message = choices[0].get("message") or {}
    text = ""
    if isinstance(message, dict):
        # A reasoning parser puts the thinking in reasoning_content; with a small max_tokens the
        # content may be empty while the model did generate.
        for key in ("content", "reasoning_content"):
            value = message.get(key)
            if isinstance(value, str) and value:
                text = value
                break
    if not text and isinstance(choices[0].get("text"), str):
        text = choices[0]["text"]
    usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
    prompt_tokens = usage.get("prompt_tokens")
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Completion(text, prompt_tokens if isinstance(prompt_tokens, int) else None,
                      cached if isinstance(cached, int) else None)


class _OpenAIEndpoint(HttpSession):
    def __init__(self, base_url: str, token: Any, **session: Any) -> None:
        super().__init__(base_url.rstrip("/").removesuffix("/v1"), token, **session)

    async def _call(self, method: str, route: str, *, json_body: Any = None, want_json: bool = True) -> Any:
        try:
            async with asyncio.timeout(self.timeout_s):
                response = await self.request(method, route, json_body=json_body)
        except TimeoutError:
            raise TransportError(self.system, f"{method} {route}: no answer within {self.timeout_s:g} s") from None
        return parse_json(self.system, response) if want_json else response

    def _reason(self, exc: BaseException) -> str:
        return self.redactor.scrub(exc.detail if isinstance(exc, ClientError) else f"{type(exc).__name__}: {exc}")


class InferenceClient(_OpenAIEndpoint):
    system = "inference"
    timeout_s = 120

    async def completion(self, model: str, messages: list[dict[str, Any]], max_tokens: int = 64) -> Completion:
        _validate_model(model)
        body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": False}
        payload = await self._call("POST", "/v1/chat/completions", json_body=body)
        parsed = parse_completion(payload, self.system)
        # Model output may happen to contain an env label (a host name): scrub it like any text.
        result = Completion(self.redactor.scrub(parsed.text), parsed.prompt_tokens, parsed.cached_tokens)
        log.info(
            "inference.completion",
            **self.redactor.scrub_obj(dict(model=model, prompt_tokens=result.prompt_tokens, cached_tokens=result.cached_tokens, chars=len(result.text))),
        )
        return result

    async def cache_hit_check(self, model: str) -> CheckResult:
        """A completion with a long fixed prefix, then a follow-up repeating the first turn;
        ok only if the follow-up reports cached prompt tokens (> 0)."""
        _validate_model(model)
        prefix = cache_check_prefix(secrets.token_hex(8))
        first_turn = [
            {"role": "system", "content": prefix},
            {"role": "user", "content": "In one word: what colour is a clear daytime sky?"},
        ]
        try:
            first = await self.completion(model, first_turn, max_tokens=32)
        except Exception as exc:  # a failed check is a result, not an exception
            return CheckResult(False, f"first turn failed: {self._reason(exc)}")
        second_turn = first_turn + [
            {"role": "assistant", "content": first.text},
            {"role": "user", "content": "In one word: what colour is grass?"},
        ]
        try:
            second = await self.completion(model, second_turn, max_tokens=32)
        except Exception as exc:
            return CheckResult(False, f"follow-up failed: {self._reason(exc)}")
        if second.cached_tokens is None:
            result = CheckResult(False, "the follow-up's usage carries no prompt_tokens_details.cached_tokens (cache report disabled?)")
        elif second.cached_tokens > 0:
            result = CheckResult(True, f"follow-up reused {second.cached_tokens} of {second.prompt_tokens} prompt tokens")
        else:
            result = CheckResult(False, f"follow-up reported 0 cached of {second.prompt_tokens} prompt tokens")
        log.info(
            "inference.cache_hit_check",
            **self.redactor.scrub_obj(dict(model=model, ok=result.ok, first_cached=first.cached_tokens, second_cached=second.cached_tokens)),
        )
        return result


class SoakRelayClient(_OpenAIEndpoint):
    system = "soak-relay"
    timeout_s = 60

    async def direct_checks(self, model: str) -> CheckResult:
        """GET /health, GET /v1/models (must list `model`), a non-empty deterministic generation."""
        _validate_model(model)
        problems: list[str] = []
        health_ok = False
        try:
            await self._call("GET", "/health", want_json=False)
            health_ok = True
        except Exception as exc:
            problems.append(f"/health: {self._reason(exc)}")
        try:
            payload = await self._call("GET", "/v1/models")
            data = payload.get("data") if isinstance(payload, dict) else None
            if not isinstance(data, list):
                raise MalformedResponse(self.system, "/v1/models answer has no 'data' list")
            models = [str(m.get("id")) for m in data if isinstance(m, dict) and m.get("id") is not None]
            if model not in models:
                problems.append(f"/v1/models does not list {model!r} (lists: {', '.join(models) or 'nothing'})")
        except Exception as exc:
            problems.append(f"/v1/models: {self._reason(exc)}")
        try:
            generation = (await self.prompt(model, "Reply with the single word: ready", max_tokens=16)).text
            if not generation.strip():
                problems.append("the deterministic generation returned empty output")
        except Exception as exc:
            problems.append(f"generation: {self._reason(exc)}")
        ok = not problems
        result = CheckResult(ok, "all direct checks passed" if ok else self.redactor.scrub("; ".join(problems)))
        log.info(
            "soak_relay.direct_checks",
            **self.redactor.scrub_obj(dict(base_url=self.base_url, model=model, ok=ok, health_ok=health_ok, reason=result.reason)),
        )
        return result

    async def health(self) -> None:
        """GET /health of this replica's engine through the relay; raises the client's errors (a
        refused connection: no relay; 502: the engine does not answer, or another one is routed)."""
        await self._call("GET", "/health", want_json=False)

    async def metrics_text(self) -> str:
        """GET /metrics through the relay: the engine's Prometheus text, unparsed."""
        response = await self._call("GET", "/metrics", want_json=False)
        return response.text

    async def prompt(self, model: str, text: str, max_tokens: int = 4) -> Completion:
        """One deterministic chat completion of this replica's engine."""
        _validate_model(model)
        body = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
                "temperature": 0, "seed": 0, "stream": False}
        return parse_completion(await self._call("POST", "/v1/chat/completions", json_body=body), self.system)
