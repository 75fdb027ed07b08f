"""Contract (b): the simulator answers each recorded request like the real compose-manager
8e07c35: same status, same content type, same body shape (keys and value types; values differ).

The 49 exchanges are replayed IN ORDER against one in-process simulated compose-manager that, like
the recorded server, starts with nothing deployed. Translations, all of values, never of shapes:
- tags: the recording's canary tag v0.0.280 is the simulator's v0.0.290 (`compose/tags.yaml`);
- env: the recording masks secrets (`***`) and clips long bodies: the simulator's env map fills
  the masked and clipped values; keys the recording shows are sent as recorded (`1BAD-KEY`);
- auth: steps named "wrong token" send a wrong token, "no auth" none;
- the lock: the recorded 409s happened while an up of nginx held the lock. The replay starts
  that up with the simulation clock frozen before the first 409 and lets it finish after the last.
A clipped recorded body is compared as its complete prefix: the simulator may have more.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from waiting import wait_until_async

from orchestrator_sim.testing import in_process_compose_manager
from recorded_exchanges import EXCHANGE_LIST, Exchange

TAGS = {"v0.0.280": "v0.0.290"}
LOCK_HOLDER = {
    "tag": "v0.0.300",
    "file": "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml",
    "services": ["nginx"],
    "dry_run": False,
}


def shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return ["list", sorted({json.dumps(shape(v), sort_keys=True) for v in value})]
    return type(value).__name__


def conforms(recorded: Any, sim: Any, *, clipped: bool, where: str = "body") -> list[str]:
    """Where the simulator's value differs in shape from the recorded one (a clipped recording
    only requires its keys; list elements must each match some element of the other side)."""
    if isinstance(recorded, dict):
        if not isinstance(sim, dict):
            return [f"{where}: object expected, got {type(sim).__name__}"]
        problems = []
        missing = set(recorded) - set(sim)
        extra = set(sim) - set(recorded)
        if missing:
            problems.append(f"{where}: missing keys {sorted(missing)}")
        if extra and not clipped:
            problems.append(f"{where}: extra keys {sorted(extra)}")
        for k in set(recorded) & set(sim):
            problems += conforms(recorded[k], sim[k], clipped=clipped, where=f"{where}.{k}")
        return problems
    if isinstance(recorded, list):
        if not isinstance(sim, list):
            return [f"{where}: list expected, got {type(sim).__name__}"]
        problems = []
        for i, item in enumerate(recorded):
            if sim and all(conforms(item, s, clipped=clipped) for s in sim):
                problems.append(f"{where}[{i}]: no simulated element of the same shape ({shape(item)})")
        return problems
    if type(recorded) is not type(sim):
        return [f"{where}: {type(recorded).__name__} expected, got {type(sim).__name__}"]
    return []


def sim_body(ex: Exchange, env: dict[str, str]) -> dict[str, Any] | None:
    body = ex.request()
    if body is None:
        return None
    if "tag" in body:
        body["tag"] = TAGS.get(body["tag"], body["tag"])
    if "env" in body:  # the simulator's env map, plus the keys only the recording has (`1BAD-KEY`, `K`)
        body["env"] = {**env, **{k: v for k, v in body["env"].items() if k not in env}}
    if ex.path == "/compose/up" and "dry_run" not in body and "tag" in body:
        body["dry_run"] = "DRY-RUN" in ex.body or "dry-run" in ex.step
    return body


def headers_for(ex: Exchange, token: str) -> dict[str, str]:
    if "no auth" in ex.step:
        return {}
    return {"Authorization": "Bearer " + ("wrong-token" if "wrong token" in ex.step else token)}


def ndjson(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def compare(ex: Exchange, r: httpx.Response) -> list[str]:
    problems = []
    if r.status_code != ex.status:
        return [f"status {r.status_code} != recorded {ex.status}: {r.text[:300]}"]
    sim_type = r.headers.get("content-type")
    sim_media = sim_type.split(";")[0].strip() if sim_type else None
    if sim_media != ex.media_type:
        problems.append(f"content type {sim_type!r} != recorded {ex.content_type!r}")
    if ex.media_type is None:
        if r.content != ex.body.encode():
            problems.append(f"body {r.content[:100]!r} != recorded {ex.body!r}")
    elif ex.media_type == "text/plain":
        prefix = ex.body.split(":", 1)[0]
        if not r.text.startswith(prefix):
            problems.append(f"text {r.text[:120]!r} does not start like {ex.body[:120]!r}")
    elif ex.media_type == "application/x-ndjson":
        rec, sim = ex.ndjson_events(), ndjson(r.text)
        kinds = [e["event"] for e in sim]
        if not ex.clipped and kinds[-1:] != ["done"]:
            problems.append(f"stream ends with {kinds[-1:]}")
        for e in rec:
            match = [s for s in sim if s["event"] == e["event"]]
            if not match:
                problems.append(f"no {e['event']!r} event in the simulated stream")
            elif all(conforms(e, s, clipped=ex.clipped) for s in match):
                problems.append(f"{e['event']!r} event shape {shape(e)} vs {shape(match[0])}")
    else:
        problems += conforms(ex.json_body(), r.json(), clipped=ex.clipped)
        if ex.path == "/docker/ps" and ex.clipped:
            from recorded_exchanges import complete_prefix

            line = complete_prefix(ex.json_body(keep_cut_string=True)["output"].split("\n", 1)[0])
            first = json.loads(r.json()["output"].split("\n", 1)[0])
            problems += conforms(line, first, clipped=True, where="ps line")
    return problems


@pytest.fixture(scope="module")
def replayed() -> dict[int, list[str]]:
    """Every exchange replayed in order; per index, how the simulator's answer differs."""

    async def run() -> dict[int, list[str]]:
        cm = in_process_compose_manager(fresh=True)
        transport = httpx.ASGITransport(app=cm.app)
        out: dict[int, list[str]] = {}
        holder: asyncio.Task[httpx.Response] | None = None
        async with httpx.AsyncClient(transport=transport, base_url="http://cm.sim", timeout=60) as client:
            for ex in EXCHANGE_LIST:
                if ex.status == 409 and holder is None:
                    cm.clock.frozen = True
                    body = {**LOCK_HOLDER, "env": cm.env}
                    holder = asyncio.create_task(client.post("/compose/up", json=body, headers=headers_for(ex, cm.token)))
                    await wait_until_async(lambda: cm.host.busy() is not None, "the lock holder's up to take the lock")
                if holder is not None and ex.status != 409 and ex.path != "/status":
                    cm.clock.frozen = False
                    assert (await holder).status_code == 200
                    holder = None
                body = sim_body(ex, cm.env)
                r = await client.request(
                    ex.method, ex.path, headers=headers_for(ex, cm.token),
                    content=json.dumps(body).encode() if body is not None else None,
                )
                out[ex.index] = compare(ex, r)
        return out

    return asyncio.run(run())


@pytest.mark.parametrize("ex", EXCHANGE_LIST, ids=lambda ex: f"{ex.index:02d}-{ex.step}")
def test_simulator_answers_like_the_real_server(ex: Exchange, replayed: dict[int, list[str]]) -> None:
    assert replayed[ex.index] == []


def test_shape_comparison_can_fail() -> None:
    assert conforms({"a": 1}, {"a": "1"}, clipped=False)
    assert conforms({"a": 1}, {"a": 1, "b": 2}, clipped=False)
    assert not conforms({"a": 1}, {"a": 1, "b": 2}, clipped=True)
    assert conforms({"in_flight": {"services": ["x"]}}, {"in_flight": {"services": [1]}}, clipped=False)
