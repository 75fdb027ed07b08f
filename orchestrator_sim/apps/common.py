"""Small pieces every simulated app shares: bearer auth and access to the recorded call."""

from __future__ import annotations

import hmac
from typing import Any

from starlette.requests import Request

from orchestrator_sim.record.calls import CallRecorder, RecordedCall


def bearer_ok(request: Request, token: str) -> bool:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode())


def recorded_call(request: Request) -> RecordedCall | None:
    state: dict[str, Any] = request.scope.get("state") or {}
    return state.get("sim_call")


def add_effect(recorder: CallRecorder, request: Request, effect: str) -> None:
    call = recorded_call(request)
    if call is not None:
        recorder.update(call, effects=[effect])


async def json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw:
        return None
    try:
        return await request.json()
    except ValueError:
        return raw.decode(errors="replace")
