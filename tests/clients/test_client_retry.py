
import pytest

import orchestrator.hosts.clients.retry as retry_mod
from orchestrator.hosts.clients.errors import BadRequest, Busy, ServerError, TransportError
from orchestrator.hosts.clients.retry import RetryPolicy, call_with_retry


class FakeClock:
    def __init__(self):
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self):
        return self.now

    async def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def failing(*errors, result="ok"):
    calls = []

    async def fn():
        calls.append(1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return result

    return fn, calls


def transport(sent=True):
    return TransportError("x", "reset", request_sent=sent)


async def test_reads_retry_transport_and_server_errors_with_growing_jittered_backoff():
    clock = FakeClock()
    policy = RetryPolicy(deadline_s=1000, max_attempts=10, initial_backoff_s=1, max_backoff_s=4)
    fn, calls = failing(transport(), ServerError("x", "502", status=502), transport(), transport(), transport())
    assert await call_with_retry(fn, policy, mutating=False, what="read", clock=clock) == "ok"
    assert len(calls) == 6
    bases = [1, 2, 4, 4, 4]
    assert all(b / 2 <= s <= b for s, b in zip(clock.sleeps, bases, strict=True))


async def test_max_attempts_bounds_transient_retries():
    clock = FakeClock()
    fn, calls = failing(*[transport()] * 10)
    with pytest.raises(TransportError):
        await call_with_retry(fn, RetryPolicy(max_attempts=3), mutating=False, what="read", clock=clock)
    assert len(calls) == 3


async def test_deadline_stops_retrying_before_a_wait_would_cross_it():
    clock = FakeClock()
    policy = RetryPolicy(deadline_s=10, max_attempts=100, initial_backoff_s=4, max_backoff_s=4)
    fn, calls = failing(*[transport()] * 100)
    with pytest.raises(TransportError):
        await call_with_retry(fn, policy, mutating=False, what="read", clock=clock)
    assert clock.now <= 10
    assert 2 <= len(calls) <= 6


async def test_mutating_calls_retry_only_what_was_not_sent():
    clock = FakeClock()
    fn, calls = failing(transport(sent=False), transport(sent=False))
    assert await call_with_retry(fn, RetryPolicy(), mutating=True, what="up", clock=clock) == "ok"
    assert len(calls) == 3
    for exc in (transport(sent=True), ServerError("x", "500")):
        fn, calls = failing(exc)
        with pytest.raises(type(exc)):
            await call_with_retry(fn, RetryPolicy(), mutating=True, what="up", clock=clock)
        assert len(calls) == 1


async def test_busy_waits_fixed_time_bounded_by_busy_retries_even_past_the_deadline():
    clock = FakeClock()
    policy = RetryPolicy(deadline_s=1, busy_retries=4, busy_wait_s=5)
    fn, calls = failing(*[Busy("x", "409", in_flight="compose_up")] * 10)
    with pytest.raises(Busy):
        await call_with_retry(fn, policy, mutating=True, what="up", clock=clock)
    assert len(calls) == 5 and clock.sleeps == [5, 5, 5, 5]
    fn, calls = failing(Busy("x", "409"), Busy("x", "409"))
    assert await call_with_retry(fn, policy, mutating=True, what="up", clock=clock) == "ok"


async def test_other_errors_are_not_retried():
    fn, calls = failing(BadRequest("x", "no"))
    with pytest.raises(BadRequest):
        await call_with_retry(fn, RetryPolicy(), mutating=False, what="read", clock=FakeClock())
    assert len(calls) == 1


def test_backoff_bounds():
    policy = RetryPolicy(initial_backoff_s=0.5, max_backoff_s=8)
    for n, base in [(1, 0.5), (2, 1), (3, 2), (5, 8), (9, 8)]:
        value = policy.backoff(n)
        assert base / 2 <= value <= base


async def test_each_attempt_calls_fn_once_and_logs_its_attempt_number(monkeypatch):
    """fn runs once per attempt; each retry logs the attempt that failed; an error that is not
    retried is raised as is, after one call."""
    logged = []
    monkeypatch.setattr(retry_mod.log, "info", lambda event, **kw: logged.append(kw["attempt"]))
    clock = FakeClock()
    fn, calls = failing(transport(), transport())
    assert await call_with_retry(fn, RetryPolicy(deadline_s=1000), mutating=False, what="read", clock=clock) == "ok"
    assert len(calls) == 3 and len(clock.sleeps) == 2 and logged == [1, 2]
    fn, calls = failing()
    assert await call_with_retry(fn, RetryPolicy(), mutating=False, what="read", clock=clock) == "ok" and len(calls) == 1
    error = BadRequest("x", "no")
    fn, calls = failing(error)
    with pytest.raises(BadRequest) as got:
        await call_with_retry(fn, RetryPolicy(), mutating=True, what="up", clock=FakeClock())
    assert got.value is error and len(calls) == 1
