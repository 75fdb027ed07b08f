"""What orchestrator/service/admission.py needs of both backends (issue 21): the run sequence, `atomic()`,
tier leases and ending a run nobody drives, on SQLite and on PostgreSQL."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from orchestrator.journal.base import JournalError, LeaseHeld, TierHeld

TTL = 60.0
HANG_GUARD_S = 60


def test_the_sequence_orders_runs_when_the_clock_steps_back(journal, make_run, clock) -> None:
    first = make_run()
    clock.advance(-3600)
    second = make_run(kind="rollback")
    assert second.created_at < first.created_at and second.seq == first.seq + 1
    assert [r.run_id for r in journal.list_runs("gpu02")] == [second.run_id, first.run_id]
    assert journal.get_run(first.run_id).seq == first.seq


def test_atomic_commits_everything_or_nothing(journal, store) -> None:
    with pytest.raises(RuntimeError):
        with journal.atomic():
            run = journal.create_run(host="gpu02", runbook="rb", tag=None, kind="rollout", state="INIT", context={})
            journal.acquire_lease("gpu02", run.run_id, "a", TTL)
            assert journal.get_run(run.run_id).run_id == run.run_id  # reads join the transaction
            raise RuntimeError("a check failed")
    assert journal.list_runs() == [] and journal.held_lease("gpu02") is None
    with journal.atomic():
        run = journal.create_run(host="gpu02", runbook="rb", tag=None, kind="rollout", state="INIT", context={})
        journal.acquire_lease("gpu02", run.run_id, "a", TTL)
    other = store.open()
    assert other.get_run(run.run_id).run_id == run.run_id and other.current_lease("gpu02").run_id == run.run_id
    with pytest.raises(JournalError, match="does not nest"):
        with journal.atomic():
            with journal.atomic():
                pass


def test_concurrent_admissions_get_distinct_sequences_and_one_lease(store) -> None:
    """Two connections admit runs of one host at once, 20 rounds: every run its own sequence number,
    exactly one admission per round holds the lease (the other rolls back: no run)."""
    a, b = store.open(), store.open()
    barrier = threading.Barrier(2)

    def admit(journal, name: str, round_: int):
        barrier.wait(timeout=HANG_GUARD_S)
        try:
            with journal.atomic():
                run = journal.create_run(host="gpu02", runbook="rb", tag=None, kind="rollout", state="INIT", context={})
                lease, _ = journal.acquire_lease("gpu02", run.run_id, name, TTL)
            return run, lease
        except LeaseHeld as exc:
            return exc

    with ThreadPoolExecutor(max_workers=2) as pool:
        for round_ in range(20):
            results = [f.result(timeout=HANG_GUARD_S) for f in
                       (pool.submit(admit, a, "a", round_), pool.submit(admit, b, "b", round_))]
            wins = [r for r in results if not isinstance(r, LeaseHeld)]
            assert len(wins) == 1, results
            a.release(wins[0][1])
    runs = a.list_runs(limit=100)
    assert len(runs) == 20 and len({r.seq for r in runs}) == 20
    assert [r.seq for r in runs] == sorted((r.seq for r in runs), reverse=True)


def test_a_tier_is_held_while_its_run_holds_its_host(journal, make_run, clock) -> None:
    gpu04 = make_run(host="gpu04")
    lease04, _ = journal.acquire_lease("gpu04", gpu04.run_id, "a", TTL)
    assert journal.claim_tier("capacity:base", "gpu04", gpu04.run_id) is None
    gpu03 = make_run(host="gpu03")
    journal.acquire_lease("gpu03", gpu03.run_id, "b", TTL)
    with pytest.raises(TierHeld) as held:
        journal.claim_tier("capacity:base", "gpu03", gpu03.run_id)
    assert (held.value.host, held.value.run_id) == ("gpu04", gpu04.run_id)
    # its holder judged gone (a dead process on this machine): taken
    assert journal.claim_tier("capacity:base", "gpu03", gpu03.run_id, takeover_if=lambda lease: True) == gpu04.run_id
    # back to gpu04 once gpu03's lease lapses
    clock.advance(TTL + 1)
    journal.heartbeat(lease04, TTL)
    assert journal.claim_tier("capacity:base", "gpu04", gpu04.run_id) == gpu03.run_id
    # released: free
    journal.release(journal.current_lease("gpu04"))
    gpu23 = make_run(host="gpu23")
    assert journal.claim_tier("capacity:base", "gpu23", gpu23.run_id) == gpu04.run_id


def test_a_run_is_ended_without_a_runner_only_when_none_drives_it(journal, make_run) -> None:
    run = make_run()
    lease, _ = journal.acquire_lease("gpu02", run.run_id, "a", TTL)
    with pytest.raises(LeaseHeld):
        journal.end_without_runner(run.run_id, "INIT", "ABORTED", "x")
    journal.release(lease)
    t = journal.end_without_runner(run.run_id, "INIT", "ABORTED", "nothing changed", note="no runner")
    ended = journal.get_run(run.run_id)
    assert ended.terminal and ended.outcome == "ABORTED" and ended.message == "nothing changed"
    assert [x.event for x in journal.transitions(run.run_id)] == ["abort"] and t.to_state == "ABORTED"
    with pytest.raises(Exception, match="ABORTED now"):
        journal.end_without_runner(run.run_id, "INIT", "ABORTED", "again")
