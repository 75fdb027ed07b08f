"""Operator signals: abort requests and gate approvals, written by the CLI, read by the runner."""

from __future__ import annotations

import pytest

from orchestrator.journal.base import JournalError, RunNotFound


def test_abort_request_is_seen_by_the_runner(store, clock, make_run) -> None:
    runner, operator = store.open(), store.open()
    run = make_run(runner)
    clock.advance(60)
    bystander = make_run(runner)
    assert runner.abort_requested(run.run_id) is False

    operator.request_abort(run.run_id, by="alice")
    operator.request_abort(run.run_id, by="bob")  # repeated: no error, still requested
    assert runner.abort_requested(run.run_id) is True
    assert runner.abort_requested(bystander.run_id) is False
    with pytest.raises(RunNotFound):
        operator.request_abort("gpu02-nope", by="alice")


def test_approvals_are_per_run_and_per_gate(store, clock, make_run) -> None:
    runner, operator = store.open(), store.open()
    run = make_run(runner)
    clock.advance(60)
    other = make_run(runner)
    assert runner.approvals(run.run_id) == set()

    operator.approve(run.run_id, "after-r1-drain", by="alice")
    operator.approve(run.run_id, "after-r1-verify", by="alice")
    operator.approve(run.run_id, "after-r1-drain", by="bob")  # idempotent
    assert runner.approvals(run.run_id) == {"after-r1-drain", "after-r1-verify"}
    assert runner.approvals(other.run_id) == set()

    with pytest.raises(RunNotFound):
        operator.approve("gpu02-nope", "g", by="alice")
    with pytest.raises(JournalError):
        operator.approve(run.run_id, "", by="alice")
    with pytest.raises(JournalError):
        operator.approve(run.run_id, "g", by="")
