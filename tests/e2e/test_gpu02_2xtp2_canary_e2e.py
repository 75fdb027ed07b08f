"""The gpu02 2xTP2 memory-optimized canary (cvm-compose-files #332,
docs/gpu02-glm53-2xtp2-memopt-canary.md) rehearsed on the simulated gpu02 as #294 left it, at tag
v0.0.332: the TP4 r2 stopped by a scoped down, r2a (GPUs 4,5) and r2b (GPUs 6,7) started as TP2
engines behind a proxy whose pool a human set in the env map, r1 the control, never touched.

- happy path: each TP2 engine logs its two ranks' 325 GiB / 2 budget, the proxy lists r1 + r2a +
  r2b, the soak passes: DONE; every compose call passed the env map as it was when sent;
- `serving-errors:r1`: the watch on r1 while r2a boots breaches; the rollback stops the pair, has
  the pool override removed, brings the TP4 r2 and the default pool back: ROLLED_BACK.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from orchestrator.language.runbook import RUNBOOK_DIR

pytestmark = pytest.mark.e2e

SPEED = 3000.0
RUNBOOK = str(RUNBOOK_DIR / "gpu02-glm53-2xtp2-memopt-canary.yaml")
TAG = "v0.0.332"
R1 = "model-sg-glm53-w4afp8-tp4-r1"
R2 = "model-sg-glm53-w4afp8-tp4-r2"
PAIR = ("model-sg-glm53-w4afp8-tp2-r2a", "model-sg-glm53-w4afp8-tp2-r2b")
POOL = ("http://model-sg-glm53-w4afp8-tp4-r1:8000,http://model-sg-glm53-w4afp8-tp2-r2a:8000,"
        "http://model-sg-glm53-w4afp8-tp2-r2b:8000")
NIGHT = datetime(2026, 12, 2, 2, 30, tzinfo=UTC)  # inside the runbook's 01:00-05:00 quiet window


@pytest.fixture
def gpu02(rehearsals):
    def make(*faults: str, cold_start_s: float = 1200):
        r = rehearsals.run(*faults, runbook=RUNBOOK, tag=TAG, r1=R1, speed=SPEED, wall=NIGHT, cold_start_s=cold_start_s,
                           operator=True)  # the demo's operator makes the env-map edits the manual steps ask for
        return r.fleet, r.final, r.r1_before, r.progress

    return make


def _r1_untouched(fleet, r1_before) -> None:
    r1 = fleet.host.container(R1)
    assert r1 is not None and r1.id == r1_before.id and r1.state == "running" and r1.tag == "v0.0.300"
    for c in fleet.calls:
        if (c.is_compose_up and not (c.body or {}).get("dry_run")) or c.is_compose_down:
            assert R1 not in (c.body or {}).get("services", []), c.body


def test_r2_becomes_two_tp2_replicas_behind_the_proxy_with_r1_untouched(gpu02):
    fleet, final, r1_before, progress = gpu02()
    assert final.outcome == "DONE", final.message
    for name in PAIR:
        c = fleet.host.container(name)
        assert c.state == "running" and c.tag == TAG and c.ready, name
        # a TP2 engine: two ranks, each with half of its 325 GiB budget
        assert any("[" in line and " TP1] HiCache startup RAM: budget=325GiB ranks=2 rank_budget_bytes=174483046400" in line
                   for line in fleet.host.logs(name)), name
        assert not any(" TP2] " in line for line in fleet.host.logs(name)), name
    r2 = fleet.host.container(R2)
    assert r2 is None or r2.state != "running"
    assert fleet.host.container("proxy-glm53").tag == TAG  # recreated with the pool of the env map
    assert fleet.host_env("gpu02")["GLM53_BACKEND_URLS"] == POOL
    pool = next(f["note"] for k, f in progress.events if k == "transition" and f["state"] == "canary.s4-pool")
    assert f"pool: {R1}:8000, {PAIR[0]}:8000, {PAIR[1]}:8000" in pool, pool
    _r1_untouched(fleet, r1_before)
    assert fleet.check_invariants() == []  # the env map passed as it was when each call was sent


def test_a_breach_on_r1_while_the_pair_boots_brings_the_tp4_r2_back(gpu02):
    fleet, final, r1_before, progress = gpu02("serving-errors:r1", cold_start_s=2700)
    assert final.outcome == "ROLLED_BACK", final.message
    assert "watch on r1 during s2-cold-start-r2a: r1 error_rate = " in final.message
    for name in PAIR:
        c = fleet.host.container(name)
        assert c is None or c.state != "running", name
    r2 = fleet.host.container(R2)
    assert r2.state == "running" and r2.ready
    assert "GLM53_BACKEND_URLS" not in fleet.host_env("gpu02")
    pool = next(f["note"] for k, f in progress.events if k == "transition" and f["state"] == "canary.rollback.rb4-pool")
    assert f"pool: {R1}:8000, {R2}:8000" in pool, pool
    _r1_untouched(fleet, r1_before)
    assert fleet.check_invariants() == []
