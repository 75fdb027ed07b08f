"""Attack: the base tier's capacity guard is a step, checked once; a run stopped after it
(Ctrl-C, crash, a pause) and resumed later drains its host without asking again."""

from __future__ import annotations

import pytest

from orchestrator_sim import BASE_HOSTS, BASE_TARGET_TAG
from orchestrator_sim.faults import FaultSpec
from test_gatekeeper_admission import ok  # tests/e2e

pytestmark = pytest.mark.e2e


def test_resume_after_the_capacity_guard_drains_even_when_another_base_host_left_the_pool(team):
    """gpu03's rollout passes `capacity.others-serve` and is Ctrl-C'd right at `drain.drain`.
    While nobody drives it, gpu04 drops out of the base pool on its own (the peers list it
    unhealthy: an engine crash, a human). `orchestrate resume RUN` continues at drain.drain and
    drains gpu03 without judging capacity again: 1 of 3 base hosts serves."""
    t = team(BASE_HOSTS)
    r = t.run("rollout", "gpu03", "--tag", BASE_TARGET_TAG, "--yes", "--soak", "0",
              "--override-prerequisite", "gpu02", signal_at="gpu03:drain.drain:SIGINT")
    assert r.returncode == 130, r.stdout[-2000:] + r.stderr[-2000:]
    [run] = t.runs("gpu03")
    assert run.state == "drain.drain" and not run.terminal
    gpu04 = t.fleet.hosts["gpu04"]
    gpu04.faults.specs = (*gpu04.faults.specs, FaultSpec("host-unhealthy", host="gpu04"))  # gpu04 leaves the pool
    gpu04.sync()
    mark = t.mark()
    r = t.run("resume", run.run_id, "--yes", "--soak", "0")
    drains = [c for c in t.mutating("gpu03", mark) if c.is_compose_down
              and "model-proxy-registrar" in ((c.body or {}).get("services") or [])]
    assert drains == [], ("gpu03 was drained while gpu04 was out of the pool: " + r.stdout[-1500:] + r.stderr[-800:])
    problems = [p for p in t.fleet.check_invariants() if "base hosts served" in p]
    assert problems == [], problems


def test_serve_adopts_a_run_ctrl_c_d_after_the_capacity_guard_and_drains_with_no_human(team):
    """The same history, but nobody types `resume`: `orchestrate serve` on the journal adopts the
    Ctrl-C'd run on its own (its lease lapsed) and drains gpu03 while gpu04 is out of the pool.
    No human asked for anything after the Ctrl-C."""
    import time

    t = team(BASE_HOSTS)
    r = t.run("rollout", "gpu03", "--tag", BASE_TARGET_TAG, "--yes", "--soak", "0",
              "--override-prerequisite", "gpu02", signal_at="gpu03:drain.drain:SIGINT")
    assert r.returncode == 130, r.stdout[-2000:] + r.stderr[-2000:]
    gpu04 = t.fleet.hosts["gpu04"]
    gpu04.faults.specs = (*gpu04.faults.specs, FaultSpec("host-unhealthy", host="gpu04"))
    gpu04.sync()
    mark = t.mark()
    t.serve(ttl="1.5")
    deadline = time.monotonic() + 30
    drains: list = []
    while time.monotonic() < deadline and not drains:
        drains = [c for c in t.mutating("gpu03", mark) if c.is_compose_down
                  and "model-proxy-registrar" in ((c.body or {}).get("services") or [])]
        time.sleep(0.5)
    assert drains == [], "serve adopted the Ctrl-C'd run and drained gpu03 with gpu04 out of the pool"
