"""Attack: `refuse_tier_short` (orchestrator/service/runner.py) returns early when the host being rolled
back has ANY reason in its listing, taken to mean "not in the pool now: the rollback brings it
back". A peer that could not be asked about that host is such a reason, so one timed-out peer
query skips the whole capacity check (fail-open), although the docstring of `tier_listing` says
"capacity is never assumed".

Fixed: the check is skipped only when every peer answered and none lists the host."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator_sim import BASE_HOSTS, BASE_TARGET_TAG
from orchestrator_sim.faults import FaultSpec

pytestmark = pytest.mark.e2e
BASE_RB = "base-glm53-w4afp8"


def test_one_unanswered_peer_query_about_the_host_itself_skips_the_capacity_check(e2e_factory, monkeypatch):
    from recording import RecordingProgress

    from orchestrator.engine.fleet import journal_overrides
    from orchestrator.hosts.clients.errors import TransportError
    from orchestrator.hosts.clients.model_proxy import ModelProxyClient
    from orchestrator.service.admission import new_rollback, new_rollout
    from orchestrator.service.runner import execute
    from orchestrator.util.user_errors import Refused

    e = e2e_factory(hosts=BASE_HOSTS)

    def rollout(host: str):
        run, rb, table = new_rollout(e.session, host, BASE_TARGET_TAG, BASE_RB)
        journal_overrides(e.session.journal, run, ["gpu02"], "test")
        return asyncio.run(execute(e.session, run, rb, table, progress=RecordingProgress(), yes=True, soak=0.0))

    assert rollout("gpu03").outcome == "DONE"
    # gpu04 leaves the pool on its own (the peers list it unhealthy: an engine crash, a human), with
    # no HALTED run in the journal: the admission's journal stand-in (refuse_tier_halted) cannot
    # see it, only the live read can
    gpu04 = e.fleet.hosts["gpu04"]
    gpu04.faults.specs = (*gpu04.faults.specs, FaultSpec("host-unhealthy", host="gpu04"))
    gpu04.sync()

    gpu03_addr = e.session.inventory.host("gpu03").model_proxy_address
    original = ModelProxyClient.presence
    failed = []

    async def flaky(self, addr, domain):
        if addr == gpu03_addr and self.name == "peer-b" and not failed:
            failed.append(addr)  # ONE query about gpu03 times out (a loaded peer)
            raise TransportError("model-proxy", "GET /presence: no answer within 10 s")
        return await original(self, addr, domain)

    monkeypatch.setattr(ModelProxyClient, "presence", flaky)
    mark = max((c.seq for c in e.fleet.calls), default=0)
    try:
        run, rb, table = asyncio.run(new_rollback(e.session, "gpu03", "all", None, None, None))
    except Refused as exc:  # the correct answer: gpu04 is out, rolling gpu03 back leaves 1 of 3
        assert "gpu04" in str(exc)
        return
    monkeypatch.setattr(ModelProxyClient, "presence", original)
    final = asyncio.run(execute(e.session, run, rb, table, progress=RecordingProgress(), yes=True, soak=0.0))
    drained = [c for c in e.fleet.calls if c.host == "gpu03" and c.seq > mark and c.is_compose_down]
    problems = [p for p in e.fleet.check_invariants() if "base hosts served" in p]
    pytest.fail(f"rollback gpu03 admitted with gpu04 out of the pool ({final.outcome}); "
                f"{len(drained)} downs on gpu03; {problems}")
