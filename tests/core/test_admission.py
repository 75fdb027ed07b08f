"""orchestrator/service/admission.py and its journal support, one guard per test (issue 21).

Each test names the guard it checks; deleting that guard makes it fail:
- the journal's run sequence (sql.py create_run / list_runs ORDER BY run_seq) -> the clock tests;
- `atomic()` (one transaction) -> test_nothing_is_written_when_a_check_or_the_door_fails;
- refuse_stale_resume by `seq` in admit(claim=) -> test_a_superseded_run_is_not_admitted_whatever_the_clocks_say;
- refuse_unsettled in admit -> test_an_unsettled_run_of_the_host_refuses_every_other_admission;
- the host lease in admit -> test_a_live_holder_refuses_and_a_gone_holder_is_taken_over;
- claim_tier in admit -> the tier tests;
- same_newest_changing_rollout -> test_a_rollback_prepared_against_an_older_rollout_is_refused;
- prerequisites: a later rollback supersedes a DONE -> test_a_rollback_after_done_unmeets_the_prerequisite;
- Executor: approvals skipped only by the command's own --yes -> tests/executor/test_humans_in_the_loop.py;
- end_without_runner's lease check -> test_a_run_with_a_live_runner_is_never_ended_from_outside.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from orchestrator.engine.rules.prerequisites import unmet
from orchestrator.journal import SqliteJournal
from orchestrator.journal.base import LeaseHeld
from orchestrator.language.runbook import load_runbook
from orchestrator.service import admission
from orchestrator.util.user_errors import Refused

GPU02 = load_runbook("gpu02-glm53-w4afp8-long-context")
BASE = load_runbook("base-glm53-w4afp8")
T0 = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def journal(tmp_path, clock):
    j = SqliteJournal(tmp_path / "j.db", now=clock)
    yield j
    j.close()


def session(journal, ttl: float = 60.0):
    return SimpleNamespace(journal=journal, settings=SimpleNamespace(lease_ttl=ttl), admitted={})


def new(host: str, kind: str = "rollout", runbook: str = GPU02.name, **kw):
    return dict(host=host, runbook=runbook, tag="v0.0.300", kind=kind, state="preflight.read-env", context={}, **kw)


def end(journal, run, outcome="HALTED"):
    """The run's runner journals its end and releases the host (as `execute` does)."""
    lease, _ = journal.acquire_lease(run.host, run.run_id, "runner", 60)
    journal.record_transition(lease, run.run_id, run.state, "halt", outcome, terminal=True, outcome=outcome, message="x")
    journal.release(lease)


def mutate(journal, run, *, settle=True):
    """A mutating call of `run` (settled or not), under its own lease, released after."""
    lease, _ = journal.acquire_lease(run.host, run.run_id, "runner", 60)
    eff = journal.record_intent(lease, run.run_id, "r2.apply", "compose_up", {"x": 1}, mutating=True)
    if settle:
        journal.record_outcome(lease, run.run_id, eff.effect_id, {"status": "success"})
    journal.release(lease)


# --------------------------------------------------------------------------- the journal's order


def test_runs_are_ordered_by_the_journal_never_by_a_clock_stepped_back(journal, clock):
    first = journal.create_run(**new("gpu02"))
    clock.now = T0 - timedelta(hours=1)  # NTP steps the clock back
    second = journal.create_run(**new("gpu02", kind="rollback"))
    assert second.created_at < first.created_at and second.seq > first.seq
    assert [r.run_id for r in journal.list_runs("gpu02")] == [second.run_id, first.run_id]


def test_a_superseded_run_is_not_admitted_whatever_the_clocks_say(journal, clock):
    s = session(journal)
    killed = journal.create_run(**new("gpu02"))
    clock.now = T0 - timedelta(hours=1)
    rollback = journal.create_run(**new("gpu02", kind="rollback", parent_run_id=killed.run_id))
    end(journal, rollback, "ROLLED_BACK")
    with pytest.raises(Refused, match=f"run {rollback.run_id} \\(rollback\\) started after {killed.run_id}"):
        admission.admit(s, host="gpu02", rb=GPU02, claim=killed.run_id)
    assert journal.held_lease("gpu02") is None


# --------------------------------------------------------------------------- one transaction


def test_nothing_is_written_when_a_check_or_the_door_fails(journal):
    s = session(journal)

    def refuse() -> None:
        raise Refused("no")

    with pytest.raises(Refused):
        admission.admit(s, host="gpu02", rb=GPU02, checks=[refuse], create=new("gpu02"))

    def door_fails(run) -> None:  # e.g. journaling the overrides
        raise RuntimeError("journal hiccup")

    with pytest.raises(RuntimeError):
        admission.admit(s, host="gpu02", rb=GPU02, create=new("gpu02"), after=door_fails)
    assert journal.list_runs() == [] and journal.held_lease("gpu02") is None
    got = admission.admit(s, host="gpu02", rb=GPU02, create=new("gpu02"))
    assert journal.list_runs()[0].run_id == got.run.run_id
    assert journal.current_lease("gpu02").run_id == got.run.run_id and got.lease.run_id == got.run.run_id


def test_an_unsettled_run_of_the_host_refuses_every_other_admission(journal):
    s = session(journal)
    stuck = journal.create_run(**new("gpu02"))
    mutate(journal, stuck, settle=False)
    with pytest.raises(Refused, match=f"run {stuck.run_id} stopped with a compose call whose outcome is unknown"):
        admission.admit(s, host="gpu02", rb=GPU02, create=new("gpu02", kind="rollback"))
    assert [r.run_id for r in journal.list_runs()] == [stuck.run_id]
    # its own resume is what settles it: admitted
    assert admission.admit(s, host="gpu02", rb=GPU02, claim=stuck.run_id).run.run_id == stuck.run_id


def test_a_live_holder_refuses_and_a_gone_holder_is_taken_over(journal, monkeypatch):
    s = session(journal)
    running = journal.create_run(**new("gpu02"))
    journal.acquire_lease("gpu02", running.run_id, "laptop:4242", 600)
    with pytest.raises(Refused, match=f"gpu02 is leased by run {running.run_id}") as refused:
        admission.admit(s, host="gpu02", rb=GPU02, create=new("gpu02"))
    # a live holder renews its lease: the advice is to follow or stop that run, never to wait for the
    # expiry and take it over as the first thing to do
    assert f"`orchestrate status {running.run_id}`" in str(refused.value)
    assert f"`orchestrate abort {running.run_id}`" in str(refused.value)
    assert "only if its process died" in str(refused.value)
    with pytest.raises(Refused, match=f"run {running.run_id} is being run by laptop:4242"):
        admission.admit(s, host="gpu02", rb=GPU02, claim=running.run_id)
    assert len(journal.list_runs()) == 1
    monkeypatch.setattr(admission, "holder_gone", lambda owner: owner == "laptop:4242")
    got = admission.admit(s, host="gpu02", rb=GPU02, claim=running.run_id)
    assert got.took_over is not None and got.took_over.owner == "laptop:4242"


# --------------------------------------------------------------------------- the tier


def tier_holders(journal) -> dict[str, str]:
    """tier -> the host of the run that last took it (the journal's own table)."""
    return {tier: host for tier, host in journal._conn.execute("SELECT tier, host FROM tier_leases")}


def test_one_host_of_a_fleet_tier_at_a_time(journal, clock):
    s = session(journal)
    gpu04 = admission.admit(s, host="gpu04", rb=BASE, create=new("gpu04", kind="rollback", runbook=BASE.name))
    assert tier_holders(journal) == {"capacity:base-glm53-w4afp8": "gpu04"}
    with pytest.raises(Refused, match=f"gpu04 has run {gpu04.run.run_id} in flight"):
        admission.admit(s, host="gpu03", rb=BASE, create=new("gpu03", runbook=BASE.name))
    assert journal.list_runs("gpu03") == []
    # a runbook without fleet capacity holds no tier
    admission.admit(s, host="gpu02", rb=GPU02, create=new("gpu02"))
    assert tier_holders(journal) == {"capacity:base-glm53-w4afp8": "gpu04"}
    # the holder's lease released (its run ended, or Ctrl-C): the tier is free
    journal.release(gpu04.lease)
    gpu03 = admission.admit(s, host="gpu03", rb=BASE, create=new("gpu03", runbook=BASE.name))
    # and its lease lapsing (a crashed runner elsewhere) frees it too
    clock.now = T0 + timedelta(seconds=120)
    admission.admit(s, host="gpu23", rb=BASE, create=new("gpu23", runbook=BASE.name))
    assert tier_holders(journal) == {"capacity:base-glm53-w4afp8": "gpu23"}
    assert gpu03.run.seq < journal.list_runs("gpu23")[0].seq


def test_a_rollback_of_a_fleet_host_is_refused_while_another_has_an_unfinished_run(journal):
    s = session(journal)
    journal.create_run(**new("gpu04", runbook=BASE.name))  # interrupted, lease released
    with pytest.raises(Refused, match="rolling gpu03 back now would drain a second host"):
        admission.admit(s, host="gpu03", rb=BASE, checks=[admission.tier_not_busy(s, "gpu03", BASE)],
                        create=new("gpu03", kind="rollback", runbook=BASE.name))


def test_a_rollback_prepared_against_an_older_rollout_is_refused(journal):
    s = session(journal)
    old = journal.create_run(**new("gpu02"))
    lease, _ = journal.acquire_lease("gpu02", old.run_id, "r", 60)
    journal.update_context(lease, old.run_id, {"previous": {"svc": {"tag": "v0.0.299", "file": "f", "commit": ""}}})
    journal.release(lease)
    read_then = journal.get_run(old.run_id)
    newer = journal.create_run(**{**new("gpu02"), "context": {"previous": {"svc": {"tag": "v0.0.300", "file": "f",
                                                                                   "commit": ""}}}})
    with pytest.raises(Refused, match=f"run {newer.run_id} changed gpu02 while this rollback was being prepared"):
        admission.admit(s, host="gpu02", rb=GPU02, checks=[admission.same_newest_changing_rollout(s, "gpu02", read_then)],
                        create=new("gpu02", kind="rollback"))


# --------------------------------------------------------------------------- prerequisites (case 8)


def test_a_rollback_after_done_unmeets_the_prerequisite():
    p = [SimpleNamespace(host="gpu02", runbook="lc", soaked=0)]

    def run(run_id, kind, outcome):
        return SimpleNamespace(run_id=run_id, kind=kind, runbook="lc", outcome=outcome, updated_at=T0)

    done = run("a", "rollout", "DONE")
    assert unmet(p, lambda h: [done], T0) == []
    assert "rollback b (ROLLED_BACK) took it back" in unmet(p, lambda h: [run("b", "rollback", "ROLLED_BACK"), done], T0)[0]
    assert "rollback b (still running)" in unmet(p, lambda h: [run("b", "rollback", None), done], T0)[0]
    # a rollback refused before any change (ABORTED) changed nothing: the DONE still holds
    assert unmet(p, lambda h: [run("b", "rollback", "ABORTED"), done], T0) == []
    # a rollout refused before any change (a mistyped tag: ABORTED, "Nothing was changed") neither
    assert unmet(p, lambda h: [run("b", "rollout", "ABORTED"), done], T0) == []
    assert "is HALTED, not DONE" in unmet(p, lambda h: [run("c", "rollout", "HALTED"), run("b", "rollout", "ABORTED"), done], T0)[0]
    assert unmet(p, lambda h: [run("b", "rollback", "ROLLED_BACK"), done], T0, overrides=["gpu02"]) == []


# --------------------------------------------------------------------------- ending an orphan (case 10)


def test_a_run_with_a_live_runner_is_never_ended_from_outside(journal, clock):
    run = journal.create_run(**new("gpu02"))
    journal.acquire_lease("gpu02", run.run_id, "laptop:4242", 60)
    with pytest.raises(LeaseHeld):
        journal.end_without_runner(run.run_id, run.state, "ABORTED", "x")
    assert not journal.get_run(run.run_id).terminal
    # its holder gone (same machine, process dead): ended, and its lease with it
    journal.end_without_runner(run.run_id, run.state, "ABORTED", "ended", takeover_if=lambda held: True)
    got = journal.get_run(run.run_id)
    assert got.terminal and got.outcome == "ABORTED" and got.message == "ended"
    assert journal.held_lease("gpu02") is None
    assert journal.transitions(run.run_id)[-1].event == "abort"


def test_an_orphan_that_changed_its_host_and_can_resume_is_left_to_resume(journal):
    from orchestrator.service.orphans import end_unowned

    s = session(journal)
    run = journal.create_run(**new("gpu02"))
    mutate(journal, run)
    assert asyncio.run(end_unowned(s, journal.get_run(run.run_id), "alice")) is None
    assert not journal.get_run(run.run_id).terminal


# --------------------------------------------------------------------------- which runbook a rollback follows


def test_every_door_rolls_back_with_the_runbook_of_the_newest_rollout_that_changed_the_host(journal):
    from orchestrator.service.admission import rollback_runbook

    s = session(journal)
    previous = {"previous": {"r2": {"tag": "v0.0.290", "file": "f.yaml", "commit": ""}}}
    done = journal.create_run(**{**new("gpu02", runbook="gpu02-glm53-w4afp8-long-context"), "context": previous})
    end(journal, done, "DONE")
    canary = journal.create_run(**{**new("gpu02", runbook="gpu02-glm53-w4afp8-pdi2-canary"), "context": previous})
    end(journal, canary, "ABORTED")  # refused before any change: it moved nothing
    assert rollback_runbook(s, "gpu02", None) == "gpu02-glm53-w4afp8-long-context"
    assert rollback_runbook(s, "gpu02", "x") == "x"  # a runbook named wins
    assert rollback_runbook(s, "gpu03", None) == "base-glm53-w4afp8"  # nothing journaled: the host's shipped runbook
