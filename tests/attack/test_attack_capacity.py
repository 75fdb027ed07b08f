"""Attack: the base tier's capacity guard is a step, checked once; a run stopped after it
(Ctrl-C, crash, a pause) and resumed later drains its host without asking again."""

from __future__ import annotations

import pytest
from test_gatekeeper_admission import ok  # tests/e2e
from waiting import wait_until, wait_until_async

from orchestrator_sim import BASE_HOSTS, BASE_TARGET_TAG
from orchestrator_sim.faults import FaultSpec

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
    t = team(BASE_HOSTS)
    r = t.run("rollout", "gpu03", "--tag", BASE_TARGET_TAG, "--yes", "--soak", "0",
              "--override-prerequisite", "gpu02", signal_at="gpu03:drain.drain:SIGINT")
    assert r.returncode == 130, r.stdout[-2000:] + r.stderr[-2000:]
    gpu04 = t.fleet.hosts["gpu04"]
    gpu04.faults.specs = (*gpu04.faults.specs, FaultSpec("host-unhealthy", host="gpu04"))
    gpu04.sync()
    [run] = t.runs("gpu03")
    mark = t.mark()
    t.serve(ttl="1.5")
    wait_until(lambda: next(r for r in t.runs("gpu03") if r.run_id == run.run_id).terminal, "serve to adopt the Ctrl-C'd run and end it", timeout=300)
    assert "run_adopted" in t.serve_log.read_text(), "the run ended, but not adopted by serve"
    drains = [c for c in t.mutating("gpu03", mark) if c.is_compose_down
              and "model-proxy-registrar" in ((c.body or {}).get("services") or [])]
    assert drains == [], "serve adopted the Ctrl-C'd run and drained gpu03 with gpu04 out of the pool"


def test_pause_after_the_capacity_guard_then_continue_drains_with_another_host_out(e2e_factory, monkeypatch):
    """No Ctrl-C at all: the page's Pause (or `orchestrate pause`), asked while `capacity.others-serve`
    runs, is honoured before `drain.drain` (a safe point). While the run is paused for hours its
    tier lease keeps other runs out, but gpu04 leaves the pool on its own; Continue drains gpu03
    without judging capacity again."""
    import asyncio

    from recording import RecordingProgress

    from orchestrator.engine.fleet import journal_overrides
    from orchestrator.engine.steps import HANDLERS
    from orchestrator.journal.sql import SqlJournal
    from orchestrator.service import signals as commands
    from orchestrator.service.admission import new_rollout
    from orchestrator.service.runner import execute

    e = e2e_factory(hosts=BASE_HOSTS)
    original = HANDLERS["presence"]

    async def presence_then_pause(rt, node, step):
        out = await original(rt, node, step)
        if node.id == "capacity.others-serve":
            commands.pause(rt.journal, rt.journal.get_run(rt.run.run_id), "alice")  # clicked while it checked
        return out

    monkeypatch.setitem(HANDLERS, "presence", presence_then_pause)
    checks: list[str] = []  # each look of the paused runner at its pause
    real_paused = SqlJournal.paused

    def paused(journal, run_id):
        checks.append(run_id)
        return real_paused(journal, run_id)

    monkeypatch.setattr(SqlJournal, "paused", paused)

    async def scenario():
        run, rb, table = new_rollout(e.session, "gpu03", BASE_TARGET_TAG, "base-glm53-w4afp8")
        journal_overrides(e.session.journal, run, ["gpu02"], "test")
        task = asyncio.create_task(execute(e.session, run, rb, table, progress=RecordingProgress(), yes=True, soak=0.0))
        await wait_until_async(lambda: task.done() or any(a.action == "pause_honoured"
                                                          for a in e.session.journal.audit(run.run_id)),
                               "the pause to be honoured")
        assert not task.done(), task.result()
        # three more looks at the pause (three polls of the paused runner): it has not moved
        honoured_at = len(checks)
        await wait_until_async(lambda: task.done() or len(checks) >= honoured_at + 3, "three polls of the paused runner")
        assert not task.done(), task.result()
        assert e.session.journal.get_run(run.run_id).state == "drain.drain"
        gpu04 = e.fleet.hosts["gpu04"]
        gpu04.faults.specs = (*gpu04.faults.specs, FaultSpec("host-unhealthy", host="gpu04"))
        gpu04.sync()
        mark = max((c.seq for c in e.fleet.calls), default=0)
        commands.continue_run(e.session.journal, e.session.journal.get_run(run.run_id), "alice")
        final = await task
        return final, mark

    final, mark = asyncio.run(scenario())
    drains = [c for c in e.fleet.calls if c.host == "gpu03" and c.seq > mark and c.is_compose_down
              and "model-proxy-registrar" in ((c.body or {}).get("services") or [])]
    assert drains == [], f"continue drained gpu03 with gpu04 out of the pool ({final.outcome})"


def test_a_resumed_rollback_does_not_drain_while_another_base_host_is_out(team):
    """The rollback table has a drain and no capacity step: `rollback gpu03` Ctrl-C'd right at its
    `drain`, gpu04 leaves the pool meanwhile, `resume` goes on. The live leave-pool guard halts it
    there (nothing sent), naming gpu04 (orchestrator/engine/leave_pool.py)."""
    t = team(BASE_HOSTS)
    ok(t.run("rollout", "gpu03", "--tag", BASE_TARGET_TAG, "--yes", "--soak", "0", "--override-prerequisite", "gpu02"))
    r = t.run("rollback", "gpu03", signal_at="gpu03:rollback-host.drain:SIGINT")
    assert r.returncode == 130, r.stdout[-2000:] + r.stderr[-2000:]
    [run] = [x for x in t.runs("gpu03") if x.kind == "rollback"]
    assert run.state == "rollback-host.drain" and not run.terminal
    gpu04 = t.fleet.hosts["gpu04"]
    gpu04.faults.specs = (*gpu04.faults.specs, FaultSpec("host-unhealthy", host="gpu04"))
    gpu04.sync()
    mark = t.mark()
    r = t.run("resume", run.run_id)
    drains = [c for c in t.mutating("gpu03", mark) if c.is_compose_down
              and "model-proxy-registrar" in ((c.body or {}).get("services") or [])]
    assert drains == [], "the resumed rollback drained gpu03 with gpu04 out of the pool: " + r.stdout[-1500:]
    assert "refusing to take gpu03 out of the pool: gpu04" in r.stdout + r.stderr, r.stdout[-1500:] + r.stderr[-800:]
    assert t.fleet.hosts["gpu03"].domain_serving[-1][1]  # gpu03 stays in the pool
