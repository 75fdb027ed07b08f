"""The lease heartbeat around a run (`run_with_heartbeat`). These use real (short) time: the
heartbeat sleeps on asyncio, not on the run's clock; the TTL is 0.3 s, a beat every 0.1 s.

Mutation list (each guard was disabled in the source, the test run and seen failing, the source
restored):
- rule 15 executor/heartbeat.py:renew, `stop=stop_after_delay(max(ttl_s / 3, 0.1))` -> `stop_after_delay(0)`
          (no retry) -> test_one_transient_journal_error_is_retried_and_the_run_continues fails
          (RunnerFenced); `retry=retry_if_not_exception_type((LeaseLost, Fenced))` -> retry everything
          -> test_a_lost_lease_fences_the_runner_at_once fails (LeaseLost retried); beat's
          `main.cancel()` removed -> the same test fails (the step runs on after the lease is gone);
          run_with_heartbeat's `if isinstance(exc, (LeaseLost, Fenced))` removed -> same test fails
          (reported as a renewal failure instead of the takeover).
- bug     loop.py:Executor.run_to_end calls `self._transition(...)` outside the try that maps
          Fenced/LeaseLost to RunnerFenced: test_a_takeover_noticed_by_the_transition_write_* is
          was xfail(strict) until the executor was fixed; it passes now.
"""

from __future__ import annotations

import asyncio

import pytest
from waiting import wait_until_async

from fakes import ENV, Rig
from orchestrator.engine.executor import RunnerFenced, run_with_heartbeat
from orchestrator.hosts.envmap import EnvMap
from orchestrator.journal.base import JournalError, LeaseLost
from orchestrator.journal.sqlite import SqliteJournal

TTL = 0.3
MASKED = EnvMap({**ENV, "HF_TOKEN": "***"})  # ends the run at its first step (ABORTED)


class FlakyJournal(SqliteJournal):
    """Heartbeats fail `fail_next` times with a transient error (a locked SQLite file)."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.fail_next = 0
        self.beats: list[str] = []

    def heartbeat(self, lease, ttl_s):
        if self.fail_next:
            self.fail_next -= 1
            self.beats.append("locked")
            raise JournalError("database is locked")
        try:
            renewed = super().heartbeat(lease, ttl_s)
        except LeaseLost:
            self.beats.append("lost")
            raise
        self.beats.append("ok")
        return renewed


async def test_one_transient_journal_error_is_retried_and_the_run_continues():
    journal = FlakyJournal(":memory:")
    rig = Rig(journal=journal, env=(MASKED,))
    journal.fail_next = 1
    first = rig.lease.expires_at

    async def wait_for_two_renewals():
        await wait_until_async(lambda: journal.beats.count("ok") >= 2, "two renewals of the lease")

    rig.dashboard.before_read = wait_for_two_renewals
    final = await run_with_heartbeat(rig.ex, journal, TTL)
    assert final.outcome == "ABORTED"  # the run reached its own end: it was not fenced
    assert journal.beats[:2] == ["locked", "ok"]
    assert rig.ex.rt.lease.expires_at != first  # the renewed lease is the one the run holds


async def test_a_lost_lease_fences_the_runner_at_once():
    journal = FlakyJournal(":memory:")
    rig = Rig(journal=journal, env=(MASKED,))
    step = {"finished": False, "cancelled": False}

    async def lose_the_lease_then_work():
        journal.release(rig.lease)  # e.g. an operator's takeover
        try:
            await asyncio.Event().wait()  # work that ends only when the runner is stopped
        except asyncio.CancelledError:
            step["cancelled"] = True
            raise
        step["finished"] = True

    rig.dashboard.before_read = lose_the_lease_then_work
    with pytest.raises(RunnerFenced) as err:
        async with asyncio.timeout(120):  # a safety net: without the fencing the step never ends
            await run_with_heartbeat(rig.ex, journal, TTL)
    assert step == {"finished": False, "cancelled": True}  # the step was stopped, not left to run on
    assert journal.beats == ["lost"]  # a lost lease is not retried
    assert "released" in str(err.value) and "could not be renewed" not in str(err.value)
    assert rig.journal.transitions(rig.run.run_id) == []


async def test_a_takeover_noticed_by_the_transition_write_fences_the_runner():
    rig = Rig(env=(MASKED,))

    async def taken_over():
        rig.journal.release(rig.lease)
        rig.journal.acquire_lease("gpu02", rig.run.run_id, "another-runner", 600)

    rig.dashboard.before_read = taken_over
    try:
        await rig.run_to_end()
    except RunnerFenced:
        pass
    except Exception as exc:  # noqa: BLE001
        raise AssertionError(f"escaped as {type(exc).__name__}: {exc}") from None
    else:
        raise AssertionError("the run went on without its lease")
    assert rig.journal.transitions(rig.run.run_id) == []
