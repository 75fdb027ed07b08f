"""Runs and their transitions, on both backends."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from orchestrator.journal.base import JournalError, RunNotFound, StateConflict, TransitionRecord, make_run_id
from orchestrator.journal.sql import Journal


def test_journal_objects_satisfy_the_protocol(journal) -> None:
    assert isinstance(journal, Journal)


def test_create_and_get_run(journal, clock, make_run) -> None:
    run = make_run(context={"services": ["r1", "r2"], "before": {"tag": "v0"}})
    assert re.fullmatch(r"gpu02-20261130T0812-[0-9a-f]{4}", run.run_id)
    assert run.created_at == run.updated_at == clock()
    assert (run.state, run.terminal, run.outcome, run.message) == ("INIT", False, None, None)

    got = journal.get_run(run.run_id)
    assert got == run
    assert got.created_at.tzinfo is not None


def test_a_second_connection_reads_what_the_first_wrote(store, make_run) -> None:
    first = store.open()
    run = make_run(first, context={"n": 1, "unicode": "café ✓", "nested": {"xs": [1, 2.5, None]}})
    assert store.open().get_run(run.run_id) == run


def test_unknown_run_raises_run_not_found(journal) -> None:
    for call in (
        journal.get_run,
        journal.transitions,
        journal.effects,
        journal.open_effects,
        journal.approvals,
        journal.abort_requested,
    ):
        with pytest.raises(RunNotFound, match="nope-1"):
            call("nope-1")


@pytest.mark.parametrize(
    "overrides",
    [{"kind": "deploy"}, {"host": ""}, {"state": ""}, {"runbook": ""}],
)
def test_create_run_validates(journal, make_run, overrides: dict[str, Any]) -> None:
    with pytest.raises(JournalError):
        make_run(**overrides)
    assert journal.list_runs() == []


def test_rollback_run_names_its_parent(journal, make_run) -> None:
    parent = make_run()
    child = make_run(kind="rollback", parent_run_id=parent.run_id, state="ROLLBACK_START")
    assert journal.get_run(child.run_id).parent_run_id == parent.run_id
    with pytest.raises(RunNotFound):
        make_run(kind="rollback", parent_run_id="gpu02-missing")


def test_list_runs_newest_first(journal, clock, make_run) -> None:
    a = make_run()
    clock.advance(60)
    b = make_run(host="gpu13")
    clock.advance(60)
    c = make_run(kind="rollback", parent_run_id=a.run_id)
    clock.advance(60)
    d = make_run()

    assert [r.run_id for r in journal.list_runs()] == [d.run_id, c.run_id, b.run_id, a.run_id]
    assert [r.run_id for r in journal.list_runs(host="gpu02")] == [d.run_id, c.run_id, a.run_id]
    assert [r.run_id for r in journal.list_runs(limit=2)] == [d.run_id, c.run_id]


def test_run_lifecycle(journal, store, clock, make_run) -> None:
    run = make_run(context={"step": 0})
    lease, _ = journal.acquire_lease("gpu02", run.run_id, "runner-a", 600)

    clock.advance(5)
    t1 = journal.record_transition(lease, run.run_id, "INIT", "start", "PRECHECK", note="go")
    assert t1 == TransitionRecord(run.run_id, 1, "INIT", "start", "PRECHECK", clock(), "go")

    clock.advance(5)
    journal.record_transition(
        lease, run.run_id, "PRECHECK", "prechecks_passed", "DEPLOY",
        context={"step": 2}, message="prechecks green",
    )
    after_two = journal.get_run(run.run_id)
    assert (after_two.state, after_two.context, after_two.message) == (
        "DEPLOY", {"step": 2}, "prechecks green",
    )
    assert after_two.updated_at == clock() and after_two.created_at == run.created_at

    clock.advance(5)
    # No context / message given: both are kept.
    journal.record_transition(lease, run.run_id, "DEPLOY", "deployed", "VERIFY")
    kept = journal.get_run(run.run_id)
    assert (kept.context, kept.message) == ({"step": 2}, "prechecks green")

    clock.advance(5)
    journal.record_transition(
        lease, run.run_id, "VERIFY", "verified", "DONE",
        terminal=True, outcome="DONE", message="rolled out",
    )
    final = store.open().get_run(run.run_id)
    assert (final.state, final.terminal, final.outcome, final.message) == (
        "DONE", True, "DONE", "rolled out",
    )
    transitions = journal.transitions(run.run_id)
    assert [t.seq for t in transitions] == [1, 2, 3, 4]
    assert [(t.from_state, t.event, t.to_state) for t in transitions] == [
        ("INIT", "start", "PRECHECK"),
        ("PRECHECK", "prechecks_passed", "DEPLOY"),
        ("DEPLOY", "deployed", "VERIFY"),
        ("VERIFY", "verified", "DONE"),
    ]
    assert transitions[0].at < transitions[-1].at

    # A finished run takes no further transitions and no new effects.
    with pytest.raises(StateConflict, match="already finished"):
        journal.record_transition(lease, run.run_id, "DONE", "again", "DEPLOY")
    with pytest.raises(StateConflict, match="already finished"):
        journal.record_intent(lease, run.run_id, "deploy", "http", {}, mutating=True)
    assert len(journal.transitions(run.run_id)) == 4


def test_stale_from_state_is_rejected_and_nothing_is_written(journal, make_run) -> None:
    run = make_run(context={"v": 1})
    lease, _ = journal.acquire_lease("gpu02", run.run_id, "runner-a", 600)
    journal.record_transition(lease, run.run_id, "INIT", "start", "PRECHECK")
    before = journal.get_run(run.run_id)

    with pytest.raises(StateConflict, match="in state PRECHECK, not INIT"):
        journal.record_transition(
            lease, run.run_id, "INIT", "start", "PRECHECK", context={"v": 2}, message="dup"
        )
    assert journal.get_run(run.run_id) == before
    assert len(journal.transitions(run.run_id)) == 1


@pytest.mark.parametrize(
    ("terminal", "outcome"),
    [(True, None), (False, "DONE"), (True, "SUCCEEDED")],
)
def test_terminal_and_outcome_go_together(journal, make_run, terminal, outcome) -> None:
    run = make_run()
    lease, _ = journal.acquire_lease("gpu02", run.run_id, "runner-a", 600)
    with pytest.raises(JournalError):
        journal.record_transition(
            lease, run.run_id, "INIT", "x", "END", terminal=terminal, outcome=outcome
        )
    assert journal.get_run(run.run_id).state == "INIT"
    assert journal.transitions(run.run_id) == []


def test_update_context_replaces_the_context(journal, clock, make_run) -> None:
    run = make_run(context={"a": 1, "b": 2})
    lease, _ = journal.acquire_lease("gpu02", run.run_id, "runner-a", 600)
    clock.advance(1)
    journal.update_context(lease, run.run_id, {"a": 3})
    got = journal.get_run(run.run_id)
    assert got.context == {"a": 3}
    assert got.updated_at == clock()
    assert got.state == "INIT"


def test_the_journal_stores_exactly_what_it_is_given(store) -> None:
    # its callers scrub text for a person before it comes here; the run's data stays exact (a
    # rollback target equal to a value the redactor hides must still be found)
    secret = "s3cr3t-bearer"
    j = store.open()
    run = j.create_run(
        host="gpu02", runbook="rb", tag=None, kind="rollout", state="INIT",
        context={"token": secret, "keep": 1},
    )
    assert run.context == {"token": secret, "keep": 1}
    lease, _ = j.acquire_lease("gpu02", run.run_id, "runner-a", 600)
    effect = j.record_intent(lease, run.run_id, "deploy", "http", {"file": f"{secret}/x.yaml"}, mutating=True)
    done = j.record_outcome(lease, run.run_id, effect.effect_id, {"lines": [secret], "status": 200})
    reader = store.open()
    assert reader.effects(run.run_id)[0].request == {"file": f"{secret}/x.yaml"} == effect.request
    assert reader.effects(run.run_id)[0].outcome == {"lines": [secret], "status": 200} == done.outcome
    assert reader.get_run(run.run_id).context == {"token": secret, "keep": 1}


def test_non_json_dicts_are_refused_without_echoing_values(journal, make_run) -> None:
    with pytest.raises(JournalError, match="not JSON-serialisable") as err:
        make_run(context={"password": b"hunter2"})
    assert "hunter2" not in str(err.value)
    with pytest.raises(JournalError):
        make_run(context={"ratio": float("nan")})
    with pytest.raises(JournalError, match="must be a dict"):
        make_run(context=["not", "a", "dict"])
    assert journal.list_runs() == []


def test_closed_journal_refuses_calls(store) -> None:
    j = store.open()
    j.close()
    j.close()  # idempotent
    with pytest.raises(JournalError, match="closed"):
        j.list_runs()


def test_make_run_id_is_short_sortable_and_typable() -> None:
    early = make_run_id("GPU02", datetime(2026, 11, 30, 8, 12, 59, tzinfo=UTC))
    late = make_run_id("GPU02", datetime(2026, 11, 30, 9, 1, tzinfo=UTC))
    assert re.fullmatch(r"gpu02-20261130T0812-[0-9a-f]{4}", early)
    assert early < late
    assert re.fullmatch(r"gpu-02-x-20261130T0812-[0-9a-f]{4}",
                        make_run_id("gpu 02/x", datetime(2026, 11, 30, 8, 12, tzinfo=UTC)))
    ids = {make_run_id("gpu02") for _ in range(50)}
    assert len(ids) > 1  # the suffix is random
