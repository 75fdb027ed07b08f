"""Against the simulator: a rollback stops only containers its run
created (by container ID, never by service name), and is judged by what its target needs.

Judged on the simulator's own record (its calls and containers), never on what the orchestrator
says about itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from recording import RecordingProgress
from waiting import expire_lease

from orchestrator.language.runbook import DEFAULT_RUNBOOK

pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
R1 = "model-sg-glm53-w4afp8-tp4-r1"
R2_NEW = "model-sg-glm53-w4afp8-tp4-r2"
R2_OLD = "model-sg-glm53-fp8-tp4-r2"
NEW_FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"
OLD_FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-Canary.yaml"
BUDGET = "GLM53_HICACHE_RAM_BUDGET"


def running(fleet, host=None):
    h = fleet.hosts[host] if host else fleet.host
    return {c.service: c for c in h.containers() if c.state in ("running", "restarting")}


def downs_of(fleet, service):
    return [c for c in fleet.calls if c.is_compose_down and c.body["services"] == [service]]


# -- case 6 ---------------------------------------------------------------------------------------
def test_a_down_refused_for_the_lock_halts_where_it_stands(e2e_factory):
    """r1's step-7 down of the old r1 is answered 409 busy past the runbook's bound for waiting a
    busy host out (`timeouts.gone`): nothing was done and nothing is wrong with any replica, so the
    run halts there instead of failing the gate into r1's rollback (which would stop whatever this
    phase had started). Both replicas keep serving and the message names the lock and the retry."""
    from orchestrator.service.admission import new_rollout
    from orchestrator.service.runner import execute

    e = e2e_factory("down-busy:r1:100000")  # a lock that never frees
    old_r1 = running(e.fleet)[R1]
    assert old_r1.file == OLD_FILE
    run, rb, table = new_rollout(e.session, "gpu02", "v0.0.300", DEFAULT_RUNBOOK)
    final = asyncio.run(execute(e.session, run, rb, table, progress=RecordingProgress(), yes=True))

    assert final.outcome == "HALTED", final.message
    assert final.message.startswith("r1.stop-old halted: compose-manager's lock stayed held by another operation past 10m"), \
        final.message
    assert "the down of model-sg-glm53-w4afp8-tp4-r1 was refused and did nothing" in final.message, final.message
    assert "--retry` sends the refused call again, from r1.stop-old" in final.message, final.message
    assert not [t for t in e.session.journal.transitions(run.run_id) if ".rollback." in t.to_state]  # no rollback ran
    # the simulator's record: every down of r1 was refused, none reached docker
    r1_downs = downs_of(e.fleet, R1)
    assert len(r1_downs) > 6 and all(c.status == 409 for c in r1_downs), [(c.status, c.outcome) for c in r1_downs]
    now = running(e.fleet)
    assert now[R1].id == old_r1.id and now[R1].state == "running" and now[R1].file == OLD_FILE
    assert now[R1].ready and now[R1].restart_count == old_r1.restart_count
    assert not [c for c in e.fleet.timeline.changes() if c.slot == "r1"]  # r1 served at every moment
    assert now[R2_NEW].file == NEW_FILE
    # the journal's ledger: the new r2 is the run's, the old r1 never was
    ctx = e.session.journal.get_run(run.run_id).context
    assert now[R2_NEW].id in ctx["created"] and old_r1.id not in ctx["created"]
    assert old_r1.id not in ctx["stopped"]
    assert e.fleet.check_invariants() == []


def test_a_relay_stop_refused_for_the_lock_is_retried_at_that_step_and_keeps_the_new_r1(e2e_factory, monkeypatch):
    """r1's relay-stop (after the new r1 passed its gates) is refused for the lock past
    `timeouts.gone`: the run halts there, and the `resume --retry` its message names sends that
    down again; it never restarts phase r1 at stop-old, which would stop the healthy new r1."""
    from orchestrator.service.admission import admit_resume, new_rollout
    from orchestrator.service.requests import ResumeRequest
    from orchestrator.service.runner import execute
    from orchestrator_sim.compose_manager import ops

    relay, held = "glm53-soak-relay", {"on": True}
    take = ops.ComposeOperations._take_lock

    def other_client_holds_it(self, req=None):
        new_r1 = any(c.service == R1 and c.file == NEW_FILE for c in self._containers.values())
        if held["on"] and req is not None and list(req.services) == [relay] and new_r1:
            raise ops.ComposeError(409, "another docker operation is already in progress: compose_up")
        return take(self, req)

    monkeypatch.setattr(ops.ComposeOperations, "_take_lock", other_client_holds_it)
    e = e2e_factory()
    run, rb, table = new_rollout(e.session, "gpu02", "v0.0.300", DEFAULT_RUNBOOK)
    final = asyncio.run(execute(e.session, run, rb, table, progress=RecordingProgress(), yes=True))
    assert final.outcome == "HALTED" and final.message.startswith("r1.relay-stop halted: compose-manager's lock"), \
        final.message
    assert f"`orchestrate resume {run.run_id} --retry` sends the refused call again, from r1.relay-stop" in final.message
    new_r1 = running(e.fleet)[R1]
    assert new_r1.file == NEW_FILE and new_r1.ready

    held["on"] = False  # the other client's operation ended; the operator runs what the message says
    adm = admit_resume(e.session, e.session.journal.get_run(run.run_id),
                       ResumeRequest(run_id=run.run_id, retry=True, yes=True))
    assert adm.run.state == "r1.relay-stop"
    after = asyncio.run(execute(e.session, adm.run, adm.rb, adm.table, progress=RecordingProgress(), yes=True))
    assert after.outcome == "DONE", after.message
    assert running(e.fleet)[R1].id == new_r1.id  # the healthy new r1 was never stopped
    assert [c for c in downs_of(e.fleet, relay) if c.status == 200]
    assert e.fleet.check_invariants() == []


# -- case 9 ---------------------------------------------------------------------------------------
SPEED = "3000"


def _env(fleet, state: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    env.update(fleet.env_for_orchestrator(state / "inventory.yaml"))
    env.update({"ORCHESTRATOR_STATE_DIR": str(state), "ORCHESTRATOR_TIME_SCALE": SPEED, "ORCHESTRATOR_LEASE_TTL": "60"})
    env.update(extra)
    return env


def _orchestrate(args, env, *, crashing=False):
    cmd = [sys.executable, str(HERE / "crashing_orchestrate.py")] if crashing else [sys.executable, "-m", "orchestrator.cli"]
    return subprocess.run(cmd + list(args), env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)


def _fleet(*faults: str):
    from orchestrator_sim import SimConfig, SimFleet

    return SimFleet(SimConfig(speed=float(SPEED), cold_start_s=1200, faults=list(faults), hosts=("gpu02",)))


def _mutating(fleet) -> dict[tuple, int]:
    out: dict[tuple, int] = {}
    for c in fleet.calls:
        if (c.is_compose_up and not c.body.get("dry_run")) or c.is_compose_down:
            key = (c.path, c.body["tag"], c.body["file"], tuple(c.body["services"]))
            out[key] = out.get(key, 0) + 1
    return out


ROLLOUT = ["rollout", "gpu02", "--tag", "v0.0.300", "--yes"]


def test_a_budget_change_after_a_crash_in_r2s_rollback_does_not_block_restoring_the_old_r2(tmp_path):
    """The new r2 fails its cold start (oom): r2's rollback stops it, and the runner is killed right
    after that down's outcome is journaled. GLM53_HICACHE_RAM_BUDGET then changes on the dashboard
    to a value the NEW engines' rule refuses. The resumed rollback is judged by what its target
    needs (the old FP8 r2 from the previous file): the old r2 is dry-run, brought back and serves;
    ROLLED_BACK (exit 3), and no destructive call is sent more often than in an uninterrupted run."""
    base_state = tmp_path / "baseline"
    base_state.mkdir()
    log = base_state / "writes.log"
    with _fleet("oom:r2") as fleet:
        r = _orchestrate(ROLLOUT, _env(fleet, base_state, ORCHESTRATOR_TEST_KILL_AFTER="0",
                                       ORCHESTRATOR_TEST_WRITE_LOG=str(log)), crashing=True)
        assert r.returncode == 3, r.stdout[-2000:] + r.stderr[-2000:]
        baseline = _mutating(fleet)
    writes = [ln.split() for ln in log.read_text().splitlines()]
    intents = [i for i, w in enumerate(writes) if w[1] == "record_intent" and w[-1] == "True"]
    kinds = [writes[i][2] for i in intents]
    # the rollback's up of the old r2 is the last mutating up; the down before it stopped the new r2
    up_old = max(n for n, k in enumerate(kinds) if k == "compose_up")
    stop_new = max(n for n, k in enumerate(kinds[:up_old]) if k.startswith("compose_down"))
    at = intents[stop_new]
    assert writes[at + 1][1] == "record_outcome"
    kill = at + 2  # 1-based count of the down's outcome write

    state = tmp_path / "crash"
    state.mkdir()
    with _fleet("oom:r2") as fleet:
        r = _orchestrate(ROLLOUT, _env(fleet, state, ORCHESTRATOR_TEST_KILL_AFTER=str(kill)), crashing=True)
        assert r.returncode == -9, r.stderr[-1000:]
        assert R2_NEW not in running(fleet) and R2_OLD not in running(fleet)  # killed right after the stop
        old_r1 = running(fleet)[R1]
        env_before, mark = dict(fleet.dashboard_env), max(c.seq for c in fleet.calls)
        fleet.set_env_var(BUDGET, "300GiB")  # the new engines' rule allows 406GiB only
        run_id = json.loads(_orchestrate(["runs", "--json"], _env(fleet, state)).stdout)[0]["run_id"]
        expire_lease(str(state / "journal.sqlite3"), "gpu02")  # the killed runner's lease has run out
        r2 = _orchestrate(["resume", run_id, "--yes"], _env(fleet, state))
        assert r2.returncode == 3, f"resume exit {r2.returncode}\n{r2.stdout[-3000:]}\n{r2.stderr[-1000:]}"
        now = running(fleet)
        assert now[R2_OLD].file == OLD_FILE and now[R2_OLD].ready, now.get(R2_OLD)
        assert R2_NEW not in now
        assert now[R1].id == old_r1.id  # r1 never touched
        got = _mutating(fleet)
        extra = {req: n for req, n in got.items() if n > baseline.get(req, 0)}
        assert extra == {}, f"mutating calls sent more often than in an uninterrupted run: {extra}"
        # the old r2 was brought back with the env map as it is now (passed whole)
        ups = [c for c in fleet.calls if c.is_compose_up and not c.body.get("dry_run") and c.body["services"] == [R2_OLD]]
        assert ups and ups[-1].body["env"].get(BUDGET) == "300GiB"
        # every compose call passed the env map whole, as the dashboard held it when it was sent
        from orchestrator_sim.record.invariants import env_difference

        for c in fleet.calls:
            if c.is_compose_up or c.is_compose_down:
                assert not env_difference(c.body.get("env"), env_before if c.seq <= mark else fleet.dashboard_env), c.seq
        whole = "did not pass the dashboard's env map whole"
        assert [f for f in fleet.check_invariants() if whole not in f] == []


def test_a_continued_rollout_keeps_the_ledger_of_the_run_it_continues(e2e_factory):
    """r1 fails (oom) after r2 moved: HALTED with the new r2 serving. `rollout --continue` starts a
    new run at phase r1; an abort there takes the whole-host rollback, whose first stop is the new
    r2 the first run created: the continued run knows it as its rollout's own."""
    from orchestrator.service.admission import new_rollout
    from orchestrator.service.runner import execute

    e = e2e_factory("oom:r1")
    run, rb, table = new_rollout(e.session, "gpu02", "v0.0.300", DEFAULT_RUNBOOK)
    first = asyncio.run(execute(e.session, run, rb, table, progress=RecordingProgress(), yes=True))
    assert first.outcome == "HALTED", first.message
    new_r2 = running(e.fleet)[R2_NEW].id
    assert new_r2 in first.context["created"]
    second, _, _ = new_rollout(e.session, "gpu02", "v0.0.300", DEFAULT_RUNBOOK, "r1")
    assert second.context["created"] == first.context["created"]
    assert second.context["stopped"] == first.context["stopped"]


def test_a_lock_held_by_another_client_after_each_stop_is_waited_out_never_leaving_a_replica_empty(tmp_path):
    """After every down, another client holds compose-manager's lock for the next 12 lock calls (the
    dashboard, another operator's dry run; the client's own busy retries give up after 6): the
    rollout and then the whole-host rollback wait each lock out, saying what holds it, and end as
    without it; r1 serves throughout. One simulated time for both sides, standing still while the
    simulator answers, so the wait's bound (`timeouts.gone`) is not spent by a loaded machine."""
    from sim_time import AnswerTimeClock

    from orchestrator.hosts.clients.retry import RetryPolicy
    from orchestrator.service.admission import new_rollback, new_rollout
    from orchestrator.service.demo import demo_settings
    from orchestrator.service.runner import execute
    from orchestrator.service.session import Session
    from orchestrator_sim import SimConfig, SimFleet

    clock = AnswerTimeClock(1200)
    with SimFleet(SimConfig(speed=1200, faults=["lock-after-down"], cold_start_s=1200), clock=clock) as fleet:
        transport = clock.transport()
        session = Session.open(demo_settings(fleet, tmp_path), clock=clock, transport=transport,
                               retry=RetryPolicy(deadline_s=900, busy_wait_s=5))
        try:
            async def both():
                try:
                    run, rb, table = new_rollout(session, "gpu02", "v0.0.300", DEFAULT_RUNBOOK)
                    progress = RecordingProgress()
                    final = await execute(session, run, rb, table, progress=progress, yes=True)
                    run, rb, table = await new_rollback(session, "gpu02", "all", None, None, None)
                    back = await execute(session, run, rb, table, progress=RecordingProgress(), yes=True)
                    return final, progress, back
                finally:
                    await transport.close()

            final, progress, back = clock.run(both())
        finally:
            session.close()
        assert final.outcome == "DONE", final.message
        waited = [f["text"] for k, f in progress.events if k == "note" and "is busy" in f.get("text", "")]
        assert waited and "waits for its lock" in waited[0], waited
        assert any(c.status == 409 for c in fleet.calls)  # the lock was really met
        assert back.outcome == "ROLLED_BACK", back.message
        now = running(fleet)
        assert now[R1].file == OLD_FILE and R2_NEW not in now
        assert fleet.check_invariants() == []
