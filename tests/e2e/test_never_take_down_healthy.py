"""Issue 12 against the simulator: the ways a healthy replica used to be torn down, each closed.

Judged on the simulator's own record (its calls and containers), never on what the orchestrator
says about itself.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from recording import RecordingProgress
from waiting import wait_until

from orchestrator.language.runbook import DEFAULT_RUNBOOK
from orchestrator.util.user_errors import UserError

pytestmark = pytest.mark.e2e

R1 = "model-sg-glm53-w4afp8-tp4-r1"
R2_NEW = "model-sg-glm53-w4afp8-tp4-r2"
R2_OLD = "model-sg-glm53-fp8-tp4-r2"
NEW_FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"


def rollout(e, *, tag="v0.0.300", yes=True, start_phase=None):
    from orchestrator.service.admission import new_rollout
    from orchestrator.service.runner import execute

    run, rb, table = new_rollout(e.session, "gpu02", tag, DEFAULT_RUNBOOK, start_phase)
    return asyncio.run(execute(e.session, run, rb, table, progress=RecordingProgress(), yes=yes))


def mutating(fleet, after_seq=0):
    return [c for c in fleet.calls if c.seq > after_seq and ((c.is_compose_up and not (c.body or {}).get("dry_run")) or c.is_compose_down)]


def running(fleet):
    return {c.service: c for c in fleet.host.containers() if c.state in ("running", "restarting")}


def last_seq(fleet):
    return max((c.seq for c in fleet.calls), default=0)


def test_rerunning_a_finished_rollout_does_nothing(e2e_factory):
    """Item 3: the second `rollout --tag v0.0.300` finds the host at target: DONE, nothing sent."""
    e = e2e_factory()
    assert rollout(e).outcome == "DONE"
    before = {s: c.id for s, c in running(e.fleet).items()}
    mark = last_seq(e.fleet)
    second = rollout(e)
    assert second.outcome == "DONE", second.message
    assert "nothing to do" in second.message
    assert mutating(e.fleet, mark) == []
    assert {s: c.id for s, c in running(e.fleet).items()} == before


def test_a_part_way_host_is_refused_without_continue_and_continued_with_it(e2e_factory):
    """Item 3 (part-way): after r2 moved and the run was cut short, a new rollout refuses (exit 5
    ABORTED, the exact command named); `--continue` places it at phase r1."""
    from orchestrator.service.host_reads import place_for_continue

    e = e2e_factory("oom:r1")
    first = rollout(e)
    assert first.outcome == "HALTED"  # r1 failed, stopped; r2 new serves alone
    mark = last_seq(e.fleet)
    second = rollout(e)
    assert second.outcome == "ABORTED", second.message
    assert "--continue" in second.message and "r1-stopped" in second.message
    assert mutating(e.fleet, mark) == []
    phase = asyncio.run(place_for_continue(e.session, "gpu02", "v0.0.300", DEFAULT_RUNBOOK))
    assert phase == "r1"


def test_abort_during_r1_cold_start_keeps_the_new_r2(e2e_factory):
    """Item 1: an abort while r1 cold-starts takes the whole-host rollback, whose first engine
    down would stop r2, the only ready replica: the run halts and r2 keeps serving.

    r1 hangs in its cold start (`cold-start-hang:r1`), so the abort always lands while r1 does not
    serve. With a normal start the gate can pass before the abort is read (a loaded machine runs
    the simulated 20-minute start in a fraction of a second); then r1 serves and the rollback may
    rightly stop r2: the test would measure scheduling, not the guard."""
    from orchestrator.service.admission import new_rollout
    from orchestrator.service.runner import execute

    e = e2e_factory("cold-start-hang:r1")
    run, rb, table = new_rollout(e.session, "gpu02", "v0.0.300", DEFAULT_RUNBOOK)
    progress = RecordingProgress()

    def abort_when_r1_starts():
        wait_until(lambda: any(ev[0] == "step_started" and ev[1].get("state") == "r1.cold-start" for ev in progress.events),
                   "r1's cold start to begin")
        e.session.journal.request_abort(run.run_id, by="test")

    t = threading.Thread(target=abort_when_r1_starts, daemon=True)
    t.start()
    final = asyncio.run(execute(e.session, run, rb, table, progress=progress, yes=True))
    t.join(5)
    assert final.outcome == "HALTED", final.message
    assert "refusing to stop" in final.message and R2_NEW in final.message
    downs = [c.body["services"] for c in mutating(e.fleet) if c.is_compose_down]
    assert [R2_NEW] not in downs
    assert R2_NEW in running(e.fleet)


def test_rollback_with_a_typo_in_to_file_stops_nothing(e2e_factory):
    """Item 6: a bad --to-file exits 2 (UserError) before any stop; only dry runs were sent."""
    from orchestrator.service.admission import new_rollback

    e = e2e_factory()
    assert rollout(e).outcome == "DONE"
    mark = last_seq(e.fleet)
    for bad in ("prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-Canery.yaml", "../../etc/passwd"):
        with pytest.raises(UserError):
            asyncio.run(new_rollback(e.session, "gpu02", "all", None, "v0.0.290", bad))
    assert mutating(e.fleet, mark) == []


def test_rollback_target_ignores_an_aborted_run(e2e_factory):
    """Item 8: an ABORTED rollout at a bad tag never becomes the rollback's run or tag."""
    from orchestrator.service.admission import new_rollback

    e = e2e_factory()
    assert rollout(e).outcome == "DONE"
    bad = rollout(e, tag="v0.0.999")
    assert bad.outcome in ("ABORTED", "DONE"), bad.message
    run, _, _ = asyncio.run(new_rollback(e.session, "gpu02", "all", None, None, None))
    assert run.tag == "v0.0.300"


def test_a_non_default_project_is_refused_up_front(e2e_factory):
    """Issue 13: compose-manager reads logs of project `work` only; a configured project would
    make every log gate wait out its 50 minutes. Refused before the run exists, nothing sent."""
    e = e2e_factory()
    inv = e.session.inventory
    entry = inv.hosts["gpu02"].model_copy(update={"project": "gpu02stack"})
    e.session.inventory = inv.model_copy(update={"hosts": {**inv.hosts, "gpu02": entry}})
    mark = last_seq(e.fleet)
    with pytest.raises(UserError, match="omit project"):
        rollout(e)
    assert [c for c in e.fleet.calls if c.seq > mark] == []
    assert e.session.journal.list_runs("gpu02") == []
