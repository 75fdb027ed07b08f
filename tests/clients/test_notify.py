"""The notifier's delivery rules (orchestrator/service/notify.py): never waits, retries what may pass,
gives up on what will not, redacts."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
from structlog.testing import capture_logs

from orchestrator.hosts.redaction import Redactor
from orchestrator.service.notify import Notifier, NotifyProgress

URL = "https://hooks.example.invalid/services/T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX"


def transport(answers: list[int], seen: list[dict]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(answers.pop(0) if answers else 200)

    return httpx.MockTransport(handle)


async def test_5xx_and_429_are_retried_then_delivered():
    seen: list[dict] = []
    with capture_logs() as logs:
        n = Notifier(URL, "slack", transport=transport([503, 429, 200], seen), backoff_s=0.001)
        n.post({"event": "run_finished", "text": "gpu02 done", "url": None})
        await n.aclose(5)
    assert logs == [] and len(seen) == 3 and seen[-1] == {"text": "gpu02 done"}


async def test_a_4xx_is_final_logged_and_the_next_notification_still_goes():
    seen: list[dict] = []
    with capture_logs() as logs:
        n = Notifier(URL, "json", transport=transport([404, 200], seen), backoff_s=0.001)
        n.post({"event": "run_finished", "run_id": "r-1", "text": "x"})
        n.post({"event": "halted", "run_id": "r-2", "text": "y"})
        await n.aclose(5)
    assert [m["run_id"] for m in seen] == ["r-1", "r-2"]  # the 404 is not retried, and the sender lives on
    [failed] = [e for e in logs if e["event"] == "notification_failed"]
    assert failed["run_id"] == "r-1" and failed["notification"] == "run_finished" and "404" in failed["error"]


async def test_a_full_queue_drops_instead_of_waiting():
    gate = asyncio.Event()

    async def handle(request: httpx.Request) -> httpx.Response:
        await gate.wait()
        return httpx.Response(200)

    n = Notifier(URL, transport=httpx.MockTransport(handle), queue_size=2)
    # `post` is a plain call that returns at once: one that waited for room would wait for ever
    # here (the receiver answers only after the posts), so reaching the next line is the proof
    with capture_logs() as logs:
        results = [n.post({"text": str(i)}) for i in range(10)]
    assert results.count(False) >= 7 and [e["event"] for e in logs].count("notification_dropped") == results.count(False)
    gate.set()
    await n.aclose(5)


async def test_close_is_bounded_when_the_receiver_hangs():
    async def handle(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(60)
        return httpx.Response(200)

    n = Notifier(URL, transport=httpx.MockTransport(handle))
    n.post({"text": "x"})
    t0 = time.perf_counter()
    await n.aclose(0.3)
    assert time.perf_counter() - t0 < 30  # not the receiver's 60 s, however loaded the machine


async def test_messages_are_redacted_and_only_approval_waits_and_ends_are_sent():
    seen: list[dict] = []
    red = Redactor()
    red.add("s3cr3t-token-value-123456")
    n = Notifier(URL, "json", scrub=red.scrub, transport=transport([], seen))
    p = NotifyProgress(n, run_id="gpu02-1", host="gpu02", kind="rollout", tag="v0.0.300", public_url="https://o.example/")
    p.event("step_started", state="r2.cold-start")
    p.event("waiting", gate="r2: rank_budget_bytes")          # not an approval: not sent
    p.event("step_started", state="r2.soak")
    for _ in range(3):                                          # announced once per gate
        p.event("waiting", gate="soak 0 s, then `orchestrate approve gpu02-1`")
    p.event("run_finished", outcome="HALTED", message="r1 failed: s3cr3t-token-value-123456 leaked?")
    await n.aclose(5)
    assert [m["event"] for m in seen] == ["waiting_for_approval", "run_finished"]
    assert seen[0]["state"] == "r2.soak" and seen[0]["url"] == "https://o.example/ui/runs/gpu02-1"
    assert "s3cr3t-token-value-123456" not in json.dumps(seen) and "HALTED" in seen[1]["text"]
