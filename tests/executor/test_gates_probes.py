"""The cold-start gate's log probes (issue 25): between two polls a `--tail 1` probe every
`log_probe_interval` ends the wait as soon as it shows a line the follower has not read, so a
failure line is acted on within a probe interval, not a poll interval; `docker ps` keeps the poll
cadence; while the probes say nothing is new the poll skips its log read (but for a full read
every FULL_READ_S); a chatty log and a time-compressed clock get no probes; a failing probe is not
a failed gate.

Mutation list (each guard disabled in the source, the test seen failing, the source restored):
- runtime.py:RunClock.wait_for_output, `if await follower.probe(): ... break` -> never breaks ->
  test_a_forbidden_line_is_acted_on_within_a_probe_interval fails (decided at the next poll);
- steps/logs.py:cold_start, the quiet skip `if waited == "quiet" and now < read_due` -> always read ->
  test_quiet_probes_replace_the_log_reads_but_for_one_full_read_a_minute fails;
  `read_due = now + FULL_READ_S` -> `now + 1e9` -> test_logs_step.py's
  test_a_line_the_probes_cannot_tell_apart_is_read_within_a_full_read_interval fails (no full read);
- steps/logs.py:cold_start, the chatty check -> test_a_chatty_log_gets_no_probes fails;
- runtime.py:RunClock.wait_for_output, the MIN_PROBE_REAL_S check -> test_a_compressed_clock_gets_no_probes fails;
- runtime.py:RunClock.wait_for_output, `except ClientError` -> test_a_failing_probe_is_not_a_failed_gate fails;
- steps/logs.py:cold_start, `c is None or` in the unprobed wait -> test_an_engine_docker_ps_does_not_list_gets_no_probes fails.
"""

from __future__ import annotations

from test_gates import MILESTONES, at_cold_start, timeline

from fakes import NEW_R2, READY, STARTUP, Rig
from orchestrator.engine.steps.logs import FULL_READ_S
from orchestrator.hosts.clients.errors import TransportError

START = STARTUP.format(api_key="")
PROBE_S = 1.75


def probed(rig: Rig, every: float = PROBE_S) -> Rig:
    rig.ex.rt.log_probe_interval = every
    return rig


def count_ps(rig: Rig) -> list[float]:
    seen: list[float] = []
    rig.compose.on_ps = lambda compose: seen.append(rig.clock.now)
    return seen


async def test_a_forbidden_line_is_acted_on_within_a_probe_interval():
    bad = "[TP2] RuntimeError: CUDA error 801: operation not supported"
    at = 100.2  # the poll interval is 30 s: polls at 0, 30, 60, 90, 120
    rig = probed(at_cold_start(script=[(0.0, START), (at, bad)]))
    ps = count_ps(rig)
    [(event, note, _)] = await rig.step()
    assert event == "fail" and "CUDA error 801" in note
    assert at < rig.clock.now <= at + PROBE_S + 1e-6  # not at the next poll (120)
    assert ps == [0.0, 30.0, 60.0, 90.0]  # docker/ps at the poll cadence only


async def test_without_probes_the_line_waits_for_the_next_poll():
    bad = "[TP2] RuntimeError: CUDA error 801: operation not supported"
    rig = at_cold_start(script=[(0.0, START), (100.2, bad)])  # log_probe_interval 0 (the Rig's default)
    [(event, _, _)] = await rig.step()
    assert event == "fail" and rig.clock.now == 120.0
    assert 1 not in rig.compose.log_tails


async def test_quiet_probes_replace_the_log_reads_but_for_one_full_read_a_minute():
    rig = probed(at_cold_start(script=[(0.0, START), *[(0.0, m) for m in MILESTONES], (600.0, READY)]))
    [(event, note, _)] = await rig.step()
    assert event == "ok", note
    reads = [t for t in rig.compose.log_tails if t != 1]
    probes = rig.compose.log_tails.count(1)
    # 600 s quiet at a 30 s poll: 20 polls, of which only one in FULL_READ_S / 30 reads the log
    assert len(reads) <= 600 / FULL_READ_S + 3, reads
    assert probes >= 600 / PROBE_S - 5


async def test_a_chatty_log_gets_no_probes():
    chatty = [(t / 4, f"[TP0] Decode batch, #token: {t}") for t in range(1, 4 * 300)]  # 4 lines/s for 300 s
    rig = probed(at_cold_start(script=[(0.0, START), *[(0.0, m) for m in MILESTONES], *chatty, (300.0, READY)]))
    [(event, note, _)] = await rig.step()
    assert event == "ok", note
    assert rig.compose.log_tails.count(1) <= 2 * 30 / PROBE_S  # at most the first interval's, before it showed chatty


class _Compressed:
    """A clock whose seconds pass 600 times faster than real ones (the demo's): a 1.5 s probe
    interval would be 2.5 ms of real time."""

    def __init__(self, clock) -> None:
        self._clock = clock

    def monotonic(self) -> float:
        return self._clock.monotonic()

    async def sleep(self, seconds: float) -> None:
        await self._clock.sleep(seconds)

    def real_seconds(self, seconds: float) -> float:
        return seconds / 600


async def test_a_compressed_clock_gets_no_probes():
    rig = probed(at_cold_start(script=timeline(START, *MILESTONES, READY)))
    rig.clock.real_seconds = _Compressed(rig.clock).real_seconds  # type: ignore[attr-defined]
    [(event, note, _)] = await rig.step()
    assert event == "ok", note
    assert 1 not in rig.compose.log_tails


async def test_a_failing_probe_is_not_a_failed_gate():
    rig = probed(at_cold_start(script=timeline(START, *MILESTONES, READY)))
    real_logs = rig.compose.logs

    async def logs(file, services, tail, project=None):
        if tail == 1:
            raise TransportError("compose-manager", "connection reset")
        return await real_logs(file, services, tail, project)

    rig.compose.logs = logs  # type: ignore[method-assign]
    [(event, note, _)] = await rig.step()
    assert (event, rig.ctx.ready.get(NEW_R2)) == ("ok", rig.compose.host[NEW_R2].id), note


async def test_an_engine_docker_ps_does_not_list_gets_no_probes():
    """Nothing of it was read, so every probe would say news: the gate keeps the poll cadence."""
    rig = probed(at_cold_start(script=[(0.0, START)]))
    del rig.compose.host[NEW_R2]  # not listed by docker/ps (an exited container)
    ps = count_ps(rig)
    rig.clock.limit = 300.0
    try:
        await rig.step()
    except Exception:  # the clock's limit: the gate would wait for its 50-minute timeout
        pass
    assert 1 not in rig.compose.log_tails
    assert ps[:4] == [0.0, 30.0, 60.0, 90.0]
