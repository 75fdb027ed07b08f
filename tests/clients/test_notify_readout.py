"""Issue 23: a canary's readout table goes to the notification URL whatever its verdict."""

from __future__ import annotations

import json

import httpx

from orchestrator.service.notify import Notifier, NotifyProgress

URL = "https://hooks.example.invalid/services/T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX"
TABLE = ("canary readout: PASS over 30 min, r2: 31 scrapes, r1: 31 scrapes\n"
         "metric    r2              r1              observed     bound          verdict\n"
         "tpot_p50  19.1 ms (n=600) 30.2 ms (n=600) r2/r1 0.632  r2/r1 <= 0.9   PASS")


async def test_a_readout_is_posted_as_a_table_and_other_transitions_are_not():
    seen: list[dict] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200)

    n = Notifier(URL, "slack", transport=httpx.MockTransport(handle))
    p = NotifyProgress(n, run_id="gpu02-7", host="gpu02", kind="rollout", tag="v0.0.305")
    p.event("transition", state="canary.relay-checks", event_name="ok", to="canary.verify", note="r2 answered")
    p.event("transition", state="canary.readout", event_name="ok", to="canary.relay-stop", note=TABLE)
    await n.aclose(5)
    assert len(seen) == 1, seen
    text = seen[0]["text"]
    assert "gpu02 rollout v0.0.305 (run gpu02-7) at canary.readout" in text
    assert "```\n" + TABLE + "\n```" in text  # monospaced: the columns stay aligned in Slack
