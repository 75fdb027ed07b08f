"""Attack: a rollback's live capacity read (`refuse_tier_short`) is advisory, and what admission
re-checks in the journal (the tier busy: a run that has not ended) does not cover a run that
ENDED outside the pool in between (case 7's HALTED host, reached through case 4's window).

Fixed twice: admission refuses a rollback while another tier host's newest run sent a drain and
ended HALTED (orchestrator/engine/leave_pool.py `refuse_tier_halted`), and the live leave-pool guard
would halt it right before its drain."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator_sim import BASE_HOSTS, BASE_TARGET_TAG

pytestmark = pytest.mark.e2e
BASE_RB = "base-glm53-w4afp8"


def test_rollback_stalled_after_its_pool_read_drains_a_second_host_when_another_run_halted_outside_the_pool(
        e2e_factory, monkeypatch):
    from recording import RecordingProgress

    from orchestrator.engine.fleet import journal_overrides
    from orchestrator.hosts.clients.retry import RetryPolicy
    from orchestrator.service import admission
    from orchestrator.service.admission import new_rollback, new_rollout
    from orchestrator.service.demo import demo_settings
    from orchestrator.service.runner import execute
    from orchestrator.service.session import Session
    from orchestrator.util.clock import ScaledClock
    from orchestrator.util.user_errors import Refused

    e = e2e_factory("no-rejoin@gpu03", hosts=BASE_HOSTS)
    # a second terminal on the same journal
    other = Session.open(demo_settings(e.fleet, e.state_dir), clock=ScaledClock(3000.0),
                         retry=RetryPolicy(deadline_s=900, busy_wait_s=5))

    async def rollout(session, host: str):
        run, rb, table = new_rollout(session, host, BASE_TARGET_TAG, BASE_RB)
        journal_overrides(session.journal, run, ["gpu02"], "test")
        return await execute(session, run, rb, table, progress=RecordingProgress(), yes=True, soak=0.0)

    try:
        assert asyncio.run(rollout(e.session, "gpu04")).outcome == "DONE"
        halted: list = []
        original = admission.refuse_tier_short

        async def slow_read(session, host, rb):
            await original(session, host, rb)  # every base host is in the pool now: passes
            # ... and the terminal stalls here (a slow peer, Ctrl-Z) while a colleague rolls gpu03
            halted.append(await rollout(other, "gpu03"))

        monkeypatch.setattr(admission, "refuse_tier_short", slow_read)
        mark = max((c.seq for c in e.fleet.calls), default=0)
        try:
            result = asyncio.run(_rollback(e.session, new_rollback, execute, RecordingProgress))
        except Refused as exc:
            result = exc
        assert halted and halted[0].outcome == "HALTED", halted and halted[0].message
        assert not e.fleet.hosts["gpu03"].domain_serving[-1][1]  # gpu03 out of the pool
        gpu04_changes = [c for c in e.fleet.calls if c.host == "gpu04" and c.seq > mark
                         and ((c.is_compose_up and not (c.body or {}).get("dry_run")) or c.is_compose_down)]
        assert gpu04_changes == [], f"gpu04 was rolled back (drained) with gpu03 out of the pool: {result}"
        assert [p for p in e.fleet.check_invariants() if "base hosts served" in p] == []
        # refused at admission (the journal: gpu03's run HALTED after its drain), naming the way out
        assert isinstance(result, Refused) and "orchestrate rollback gpu03" in str(result), result
    finally:
        other.close()


async def _rollback(session, new_rollback, execute, progress):
    run, rb, table = await new_rollback(session, "gpu04", "all", None, None, None)
    return await execute(session, run, rb, table, progress=progress(), yes=True, soak=0.0)
