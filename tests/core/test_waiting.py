"""The suite's waiting helpers (tests/waiting.py): a wait that gives up names what it waited for,
and a lease the test expires is expired for every reader of the journal."""

from __future__ import annotations

import asyncio

import pytest
from waiting import expire_lease, wait_until, wait_until_async

from orchestrator.journal import open_journal
from orchestrator.journal.base import LeaseHeld


def test_wait_until_returns_the_value_and_a_timeout_names_what_it_waited_for():
    looks = iter([None, 0, "here"])
    assert wait_until(lambda: next(looks), "the third look", interval=0) == "here"
    with pytest.raises(AssertionError, match=r"waiting for the run to end \(last seen: ''\)"):
        wait_until(lambda: "", "the run to end", timeout=0)


def test_wait_until_async_awaits_an_awaitable_predicate():
    looks = iter([None, "ready"])

    async def look():
        return next(looks)

    assert asyncio.run(wait_until_async(look, "a coroutine predicate", interval=0)) == "ready"
    with pytest.raises(AssertionError, match="waiting for nothing"):
        asyncio.run(wait_until_async(lambda: False, "nothing", timeout=0))


def test_expire_lease_ends_a_live_lease_for_every_reader(tmp_path):
    path = str(tmp_path / "journal.sqlite3")
    j = open_journal(path)
    run = j.create_run(host="gpu02", runbook="rb", tag="v1", kind="rollout", state="INIT", context={})
    lease, _ = j.acquire_lease("gpu02", run.run_id, "dead:1", 3600)
    with pytest.raises(LeaseHeld):
        j.acquire_lease("gpu02", "gpu02-other", "other:2", 60)
    expire_lease(path, "gpu02")
    assert j.current_lease("gpu02") is None
    _, previous = j.acquire_lease("gpu02", run.run_id, "other:2", 60)
    assert previous is not None and previous.owner == "dead:1"  # taken over as an expired lease
    with pytest.raises(AssertionError, match="no unreleased lease"):
        expire_lease(path, "gpu13")
    j.close()
