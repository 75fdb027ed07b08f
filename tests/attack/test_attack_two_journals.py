"""Attack: two journals (two state directories, or SQLite on one laptop and the team's PostgreSQL)
rolling two DIFFERENT base hosts. The tier lease and the `unfinished` check live in one journal;
foreign-change detection compares one host's action log with one journal. Nothing sees the other
host's run, and the capacity guard's peer read races the other host's drain.

Mitigated, not closed (docs/admission.md, "Two journals"): right after its drain is confirmed each
run reads the other hosts at the peers again (orchestrator/engine/leave_pool.py `recheck_after_drain`);
the tier short, it rejoins at once and halts naming the other host. What remains is the window
between the two drains and that rejoin: bounded, and the tier is whole again at the end."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator_sim import BASE_HOSTS, BASE_TARGET_TAG

pytestmark = pytest.mark.e2e
BASE_RB = "base-glm53-w4afp8"


def test_two_journals_drain_two_base_hosts_at_once(e2e_factory):
    from recording import RecordingProgress

    from orchestrator.engine.fleet import journal_overrides
    from orchestrator.hosts.clients.retry import RetryPolicy
    from orchestrator.service.admission import new_rollout
    from orchestrator.service.demo import demo_settings
    from orchestrator.service.runner import execute
    from orchestrator.service.session import Session
    from orchestrator.util.clock import ScaledClock

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
        outcomes = [(getattr(r, "outcome", repr(r)), getattr(r, "message", "") or "") for r in results]
        assert any(o != "DONE" for o, _ in outcomes), outcomes  # before: both DONE, each sure the other carried it
        for (o, msg), peer in zip(outcomes, ("gpu04", "gpu03")):
            rejoined = f"{peer} left the pool" in msg and "rejoined at once" in msg and "another orchestrator" in msg
            # or the live leave-pool guard saw the other drain first, and nothing was sent
            refused = f"out of the pool: {peer} is out of the pool" in msg and "Nothing was sent" in msg
            assert o == "DONE" or (o == "HALTED" and (rejoined or refused)), (o, msg)
        assert all(e.fleet.hosts[h].domain_serving[-1][1] for h in BASE_HOSTS)  # every base host back in the pool
        windows = _short_windows({h: e.fleet.hosts[h].domain_serving for h in BASE_HOSTS})
        assert len(windows) <= 1 and all(end - start < 3600 for start, end in windows), windows
    finally:
        other.close()


def _short_windows(serving: dict[str, list[tuple[float, bool]]]) -> list[tuple[float, float]]:
    """(start, end) of every interval, in simulated seconds, with fewer than 2 base hosts serving."""
    events = sorted((at, h, up) for h, changes in serving.items() for at, up in changes)
    state: dict[str, bool] = {}
    out: list[tuple[float, float]] = []
    since = None
    for at, h, up in events:
        state[h] = up
        short = sum(state.values()) < 2
        if short and since is None:
            since = at
        elif not short and since is not None:
            if at > since:
                out.append((since, at))
            since = None
    if since is not None:
        out.append((since, float("inf")))
    return out
