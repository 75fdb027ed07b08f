"""Settling with `status()`: while the simulated compose-manager holds its lock (an up in flight),
`status()` names the operation; once the up is done it is None. This is how a caller whose stream
broke tells "still running" from "finished" before judging the outcome."""

from __future__ import annotations

import asyncio

import httpx
from fast_retry import immediate_retry
from waiting import wait_until_async

from orchestrator.hosts.clients.compose_manager import ComposeManagerClient, ComposeRequest
from orchestrator.hosts.envmap import EnvMap
from orchestrator_sim.testing import CANARY, OLD_TAG, in_process_compose_manager


async def test_status_shows_the_up_in_flight_and_clears_when_done() -> None:
    cm = in_process_compose_manager(fresh=False)
    transport = httpx.ASGITransport(app=cm.app)
    async with ComposeManagerClient("http://cm.sim", cm.token, transport=transport, retry=immediate_retry()) as client:
        assert await client.status() is None
        cm.clock.frozen = True  # the up cannot finish until the clock moves
        req = ComposeRequest(tag=OLD_TAG, file=CANARY, services=("dcgm-glm53",), force_recreate=True, allow_force_recreate=True)
        up = asyncio.create_task(client.up(req, EnvMap(cm.env)))
        in_flight = await wait_until_async(client.status, "status() to name the up in flight")
        assert (in_flight.action, in_flight.tag, in_flight.file, in_flight.services) == (
            "compose_up", OLD_TAG, CANARY, ("dcgm-glm53",)
        )
        assert not up.done()
        cm.clock.frozen = False
        outcome = await asyncio.wait_for(up, 30)
        assert outcome.status == "success"
        assert await client.status() is None
        version = await client.version()
        assert version.project().current.tag == OLD_TAG and version.last_attempt.tag == OLD_TAG
