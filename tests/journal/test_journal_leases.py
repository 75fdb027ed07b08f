"""Host leases and fencing tokens."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.journal.base import Fenced, JournalError, Lease, LeaseHeld, LeaseLost

TTL = 60.0


def test_first_acquisition(journal, clock, make_run) -> None:
    run = make_run()
    lease, previous = journal.acquire_lease("gpu02", run.run_id, "runner-a", TTL)
    assert previous is None
    assert lease == Lease("gpu02", run.run_id, "runner-a", 1, clock() + timedelta(seconds=TTL))
    assert journal.current_lease("gpu02") == lease
    assert journal.current_lease("gpu13") is None


def test_a_live_lease_of_another_run_or_owner_is_held(journal, clock, make_run) -> None:
    a = make_run()
    clock.advance(60)
    b = make_run()
    lease, _ = journal.acquire_lease("gpu02", a.run_id, "runner-a", TTL)
    clock.advance(TTL - 1)

    with pytest.raises(LeaseHeld) as err:
        journal.acquire_lease("gpu02", b.run_id, "runner-b", TTL)
    assert (err.value.holder_run_id, err.value.owner, err.value.expires_at) == (
        a.run_id, "runner-a", lease.expires_at,
    )
    assert a.run_id in str(err.value)
    with pytest.raises(LeaseHeld):  # the same run from another process is another owner
        journal.acquire_lease("gpu02", a.run_id, "runner-b", TTL)
    assert journal.current_lease("gpu02") == lease


def test_reacquiring_own_live_lease_renews_it_with_a_new_token(journal, clock, make_run) -> None:
    run = make_run()
    first, _ = journal.acquire_lease("gpu02", run.run_id, "runner-a", TTL)
    clock.advance(10)
    second, previous = journal.acquire_lease("gpu02", run.run_id, "runner-a", TTL)
    assert previous is None
    assert second.token == first.token + 1
    assert second.expires_at == clock() + timedelta(seconds=TTL)
    # Every acquisition bumps the token, so the superseded Lease object is stale.
    with pytest.raises(Fenced):
        journal.update_context(first, run.run_id, {"x": 1})
    journal.update_context(second, run.run_id, {"x": 1})


def test_heartbeat_extends_and_keeps_the_token(journal, clock, make_run) -> None:
    run = make_run()
    lease, _ = journal.acquire_lease("gpu02", run.run_id, "runner-a", TTL)
    clock.advance(50)
    renewed = journal.heartbeat(lease, TTL)
    assert renewed == Lease(lease.host, lease.run_id, lease.owner, lease.token,
                            clock() + timedelta(seconds=TTL))
    clock.advance(50)  # past the first expiry, within the renewed one
    assert journal.current_lease("gpu02") == renewed


def test_expired_lease_is_taken_over_and_returned(journal, clock, make_run) -> None:
    a = make_run()
    clock.advance(60)
    b = make_run()
    lease_a, _ = journal.acquire_lease("gpu02", a.run_id, "runner-a", TTL)
    clock.advance(TTL)  # expires_at == now: no longer live
    assert journal.current_lease("gpu02") is None

    lease_b, previous = journal.acquire_lease("gpu02", b.run_id, "runner-b", TTL)
    assert previous == lease_a
    assert lease_b.token == lease_a.token + 1
    assert journal.current_lease("gpu02") == lease_b


def test_expired_but_not_taken_over_lease_still_works(journal, clock, make_run) -> None:
    run = make_run()
    lease, _ = journal.acquire_lease("gpu02", run.run_id, "runner-a", TTL)
    clock.advance(TTL * 3)  # e.g. a long pause; nobody took the host
    journal.record_transition(lease, run.run_id, "INIT", "start", "DEPLOY")
    renewed = journal.heartbeat(lease, TTL)
    assert renewed.token == lease.token
    assert journal.current_lease("gpu02") == renewed


def test_release_frees_the_host_and_tokens_never_repeat(journal, clock, make_run) -> None:
    a = make_run()
    clock.advance(60)
    b = make_run()
    lease_a, _ = journal.acquire_lease("gpu02", a.run_id, "runner-a", TTL)
    journal.release(lease_a)
    journal.release(lease_a)  # twice: no error
    assert journal.current_lease("gpu02") is None
    with pytest.raises(Fenced, match="released"):
        journal.record_transition(lease_a, a.run_id, "INIT", "start", "DEPLOY")
    with pytest.raises(LeaseLost, match="released"):
        journal.heartbeat(lease_a, TTL)

    lease_b, previous = journal.acquire_lease("gpu02", b.run_id, "runner-b", TTL)
    assert previous is None  # a released lease is not "taken over"
    assert lease_b.token == lease_a.token + 1
    clock.advance(TTL + 1)
    journal.release(lease_b)  # after expiry: no error
    assert journal.current_lease("gpu02") is None

    lease_c, _ = journal.acquire_lease("gpu13", "gpu13-not-created-yet", "runner-c", TTL)
    assert lease_c.token == 1  # tokens are per host


def test_lease_arguments_are_checked(journal, make_run) -> None:
    run = make_run()
    with pytest.raises(JournalError, match="ttl_s"):
        journal.acquire_lease("gpu02", run.run_id, "runner-a", 0)
    with pytest.raises(JournalError, match="belongs to host gpu02"):
        journal.acquire_lease("gpu13", run.run_id, "runner-a", TTL)
    lease, _ = journal.acquire_lease("gpu02", run.run_id, "runner-a", TTL)
    with pytest.raises(JournalError, match="ttl_s"):
        journal.heartbeat(lease, -5)
    other = make_run(host="gpu13")
    with pytest.raises(JournalError, match="cannot write run"):
        journal.update_context(lease, other.run_id, {})


@pytest.mark.parametrize("b_is_new_run", [False, True], ids=["resume-same-run", "new-run"])
def test_runner_whose_lease_was_taken_over_is_fenced(store, clock, make_run, b_is_new_run) -> None:
    a = store.open()
    b = store.open()
    run = make_run(a, context={"phase": "a"})
    lease_a, _ = a.acquire_lease("gpu02", run.run_id, "runner-a", TTL)
    a.record_transition(lease_a, run.run_id, "INIT", "start", "DEPLOY")
    answered = a.record_intent(lease_a, run.run_id, "probe", "http.get", {}, mutating=False)
    a.record_outcome(lease_a, run.run_id, answered.effect_id, {"status": 200})
    pending = a.record_intent(lease_a, run.run_id, "deploy", "http.post", {}, mutating=True)

    clock.advance(TTL + 1)  # A stalls past its lease
    b_run_id = make_run(b).run_id if b_is_new_run else run.run_id
    lease_b, previous = b.acquire_lease("gpu02", b_run_id, "runner-b", TTL)
    assert previous == lease_a
    assert lease_b.token > lease_a.token

    before = (b.get_run(run.run_id), b.transitions(run.run_id), b.effects(run.run_id))

    with pytest.raises(Fenced) as err:
        a.record_transition(lease_a, run.run_id, "DEPLOY", "deployed", "VERIFY",
                            context={"phase": "stale"})
    message = str(err.value)
    assert "taken over" in message and "runner-b" in message and b_run_id in message
    with pytest.raises(Fenced):
        a.record_intent(lease_a, run.run_id, "restart", "http.post", {}, mutating=True)
    with pytest.raises(Fenced):
        a.record_outcome(lease_a, run.run_id, pending.effect_id, {"status": 200})
    with pytest.raises(Fenced):
        a.update_context(lease_a, run.run_id, {"phase": "stale"})
    with pytest.raises(LeaseLost, match=b_run_id):
        a.heartbeat(lease_a, TTL)
    with pytest.raises(LeaseLost):
        a.release(lease_a)

    # Nothing A tried is in the journal, as seen through a fresh connection.
    fresh = store.open()
    assert (fresh.get_run(run.run_id), fresh.transitions(run.run_id),
            fresh.effects(run.run_id)) == before
    assert fresh.current_lease("gpu02") == lease_b

    # B holds the host: it can finish the run A left behind.
    b.record_outcome(lease_b, run.run_id, pending.effect_id, {"reconciled": True})
    b.record_transition(lease_b, run.run_id, "DEPLOY", "halted", "HALTED",
                        terminal=True, outcome="HALTED", message="taken over")
    assert fresh.get_run(run.run_id).outcome == "HALTED"


# --------------------------------------------------------------------------- model-based


@dataclass
class _Model:
    token: int = 0
    holder: int | None = None
    expires: datetime | None = None
    released: bool = True

    def live(self, now: datetime) -> bool:
        return self.holder is not None and not self.released and self.expires > now


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("acquire"), st.integers(0, 2)),
        st.tuples(st.just("heartbeat"), st.integers(0, 2)),
        st.tuples(st.just("release"), st.integers(0, 2)),
        st.tuples(st.just("write"), st.integers(0, 2)),
        st.tuples(st.just("advance"), st.sampled_from([1, 30, 61, 200])),
    ),
    max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops)
def test_leases_follow_the_model(journal, clock, ops) -> None:
    """Random acquire/heartbeat/release/write/expire sequences against a reference model."""
    host = f"h{uuid.uuid4().hex[:10]}"
    runs = [
        journal.create_run(host=host, runbook="rb", tag=None, kind="rollout", state="S", context={}).run_id
        for i in range(3)
    ]
    model = _Model()
    held: dict[int, Lease] = {}
    tokens_seen: list[int] = []

    for op in ops:
        now = clock()
        if op[0] == "advance":
            clock.advance(op[1])
        elif op[0] == "acquire":
            r = op[1]
            if model.live(now) and model.holder != r:
                with pytest.raises(LeaseHeld):
                    journal.acquire_lease(host, runs[r], f"o{r}", TTL)
                continue
            expired_unreleased = model.holder is not None and not model.released and not model.live(now)
            lease, previous = journal.acquire_lease(host, runs[r], f"o{r}", TTL)
            if expired_unreleased:
                assert previous is not None and previous.token == model.token
            else:
                assert previous is None
            model.token += 1
            model.holder, model.expires, model.released = r, now + timedelta(seconds=TTL), False
            assert lease.token == model.token
            tokens_seen.append(lease.token)
            held[r] = lease
        elif op[1] in held:
            r = op[1]
            lease = held[r]
            valid = lease.token == model.token and not model.released
            if op[0] == "heartbeat":
                if valid:
                    held[r] = journal.heartbeat(lease, TTL)
                    model.expires = now + timedelta(seconds=TTL)
                else:
                    with pytest.raises(LeaseLost):
                        journal.heartbeat(lease, TTL)
            elif op[0] == "release":
                if lease.token == model.token:
                    journal.release(lease)
                    model.released = True
                else:
                    with pytest.raises(LeaseLost):
                        journal.release(lease)
            elif op[0] == "write":
                if valid:
                    journal.update_context(lease, runs[r], {"by": r})
                else:
                    with pytest.raises(Fenced):
                        journal.update_context(lease, runs[r], {"by": r})

        current = journal.current_lease(host)
        if model.live(clock()):
            assert current is not None
            assert (current.token, current.run_id) == (model.token, runs[model.holder])
        else:
            assert current is None

    assert tokens_seen == sorted(set(tokens_seen))  # strictly increasing, never reused


def test_a_live_lease_whose_holder_is_gone_is_taken_over_at_once(journal, clock, make_run) -> None:
    """`takeover_if` (journal/owner.py's holder_gone in production) runs on the locked holder:
    True takes a live lease over (a new token, the old holder fenced); False leaves it held."""
    a = make_run()
    b = make_run()
    old, _ = journal.acquire_lease("gpu02", a.run_id, "runner-a", TTL)
    seen: list[Lease] = []

    with pytest.raises(LeaseHeld):
        journal.acquire_lease("gpu02", b.run_id, "runner-b", TTL, takeover_if=lambda held: seen.append(held) or False)
    assert seen == [old]

    new, previous = journal.acquire_lease("gpu02", b.run_id, "runner-b", TTL, takeover_if=lambda held: True)
    assert previous == old and new.token == old.token + 1
    with pytest.raises(Fenced):
        journal.record_transition(old, a.run_id, "INIT", "ok", "NEXT")
    with pytest.raises(LeaseLost):
        journal.release(old)


def test_held_lease_shows_an_expired_unreleased_lease_until_released(journal, clock, make_run) -> None:
    run = make_run()
    assert journal.held_lease("gpu02") is None
    lease, _ = journal.acquire_lease("gpu02", run.run_id, "runner-a", TTL)
    clock.advance(TTL + 1)
    assert journal.current_lease("gpu02") is None  # expired: nobody holds it live
    assert journal.held_lease("gpu02") == lease  # but its runner never released it
    journal.release(lease)
    assert journal.held_lease("gpu02") is None
