"""Attack: two journals (two state directories, or SQLite on one laptop and the team's PostgreSQL)
rolling two DIFFERENT base hosts. The tier lease and the `unfinished` check live in one journal;
foreign-change detection compares one host's action log with one journal. Nothing sees the other
host's run, and the capacity guard's peer read races the other host's drain."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator_sim import BASE_HOSTS, BASE_TARGET_TAG

pytestmark = pytest.mark.e2e
BASE_RB = "base-glm53-w4afp8"


def test_two_journals_drain_two_base_hosts_at_once(e2e_factory):
    from orchestrator.clients.retry import RetryPolicy
    from orchestrator.clock import ScaledClock
    from orchestrator.demo import demo_settings
    from orchestrator.fleet import journal_overrides
    from orchestrator.progress import RecordingProgress
    from orchestrator.runner import Session, execute, new_rollout

    e = e2e_factory(hosts=BASE_HOSTS)
    other_state = e.state_dir.parent / "other-state"
    other_state.mkdir()
    other = Session.open(demo_settings(e.fleet, other_state), clock=ScaledClock(3000.0),
                         retry=RetryPolicy(deadline_s=900, busy_wait_s=5))

    async def rollout(session, host: str):
        run, rb, table = new_rollout(session, host, BASE_TARGET_TAG, BASE_RB)
        journal_overrides(session.journal, run, ["gpu02"], "test")
        return await execute(session, run, rb, table, progress=RecordingProgress(), yes=True, soak=0.0)

    async def both():
        return await asyncio.gather(rollout(e.session, "gpu03"), rollout(other, "gpu04"), return_exceptions=True)

    try:
        results = asyncio.run(both())
        outcomes = [getattr(r, "outcome", repr(r)) for r in results]
        problems = [p for p in e.fleet.check_invariants() if "base hosts served" in p]
        assert problems == [], (outcomes, problems)  # both DONE, each sure the other carried the domain
    finally:
        other.close()
