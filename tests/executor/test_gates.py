"""The cold-start gate and the soak.

Mutation list (each guard was disabled in the source, the test run and seen failing, the source
restored):
- rule 11 steps/gates.py:cold_start, `if starts > 1: return fail(...)` removed ->
          test_cold_start_fails_on_a_second_startup_line fails (OK);
          `if c.id != first_id: return fail(...)` removed -> test_cold_start_fails_when_the_container_id_changes
          fails (OK); `if res.failed: return fail(...)` removed -> test_cold_start_fails_on_a_forbidden_line_*
          fails (times out without the line); `if c.restarting: return fail(...)` removed ->
          test_cold_start_fails_when_the_engine_restarts fails;
          runtime.py:HostReads.follower, `initial_tail: int = COLD_START_WINDOW` -> 200 ->
          test_resumed_cold_start_reads_the_whole_start_on_its_first_poll fails.
- rule 12 runtime.py:Serving.engines_still_serving, each of `if c.id != cid`, `if c.restarting or
          c.state != "running"`, `if ... now_up < up` removed -> the matching
          test_soak_fails_when_an_engine_restarts[...] cases fail (soak passes);
          steps/gates.py:soak, `already = float(rt.ctx.soaks.get(node.id, 0.0))` -> `0.0` and,
          separately, `rt.save_context()` removed -> test_resumed_soak_continues_the_journaled_time fails;
          `approved = (not need_approval) or bool({node.id, "*"} & approvals)` -> `not need_approval`
          -> test_an_approval_in_the_journal_is_not_waited_for_again fails (runs into the clock limit).
- bug     steps/gates.py:soak announces "then `orchestrate approve RUN_ID`" whenever
          `need_approval`, even when the journal already holds the approval:
          test_an_approval_in_the_journal_is_not_asked_for_again was xfail(strict) until the executor was fixed; it passes now.
- bug     steps/gates.py:soak takes its baseline afresh on resume (`watched = await rt.watch_engines()`)
          while continuing the journaled time; ctx.ready is never read:
          test_resumed_soak_fails_when_an_engine_was_replaced_while_the_runner_was_down was xfail(strict) until the executor was fixed; it passes now.
"""

from __future__ import annotations

import pytest

from fakes import NEW_R2, R1, RANK_BUDGET, RB, READY, STARTUP, TAG, ClockLimit, Rig, ctx_at, engine_log
from orchestrator.engine.executor.runtime import COLD_START_WINDOW

START = STARTUP.format(api_key="")
MILESTONES = engine_log(ready=False)[1:]


def at_cold_start(*, log: list[str] | None = None, script: list[tuple[float, str]] = ()) -> Rig:
    """The new r2 was just applied; r1 serves on the previous file."""
    rig = Rig(state="r2.cold-start", ctx=ctx_at())
    rig.compose.run(R1)
    c = rig.compose.run(NEW_R2, file=RB.file, tag=TAG, log=log or [], started=0.0)
    c.script = list(script)
    return rig


def timeline(*lines: str, every: float = 60.0) -> list[tuple[float, str]]:
    return [(i * every, ln) for i, ln in enumerate(lines)]


# -- rule 11 --------------------------------------------------------------------------------------

async def test_cold_start_passes_on_every_rank_then_the_ready_line():
    rig = at_cold_start(script=timeline(START, *MILESTONES, READY))
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.relay-dry-run"), note
    assert rig.ctx.ready[NEW_R2] == rig.compose.host[NEW_R2].id


async def test_cold_start_fails_on_a_second_startup_line():
    # a restart inside the same container: same ID, a second `server_args=ServerArgs(`
    rig = at_cold_start(script=timeline(START, *MILESTONES, START, READY))
    [(event, note, to)] = await rig.step()
    assert event == "fail" and to == "r2.rollback.relay-stop"
    assert "second startup line" in note


async def test_cold_start_fails_when_the_container_id_changes():
    rig = at_cold_start()  # nothing logged yet

    def replaced(compose):
        if rig.clock.now >= 90 and compose.host[NEW_R2].log == []:
            compose.run(NEW_R2, file=RB.file, tag=TAG, started=rig.clock.now)  # a new container, a whole start

    rig.compose.on_ps = replaced
    [(event, note, to)] = await rig.step()
    assert event == "fail" and "container ID changed" in note


async def test_cold_start_fails_when_the_engine_restarts():
    rig = at_cold_start(script=timeline(START, *MILESTONES[:3]))

    def restarting(compose):
        if rig.clock.now >= 150:
            compose.host[NEW_R2].state = "restarting"

    rig.compose.on_ps = restarting
    [(event, note, to)] = await rig.step()
    assert event == "fail" and "is restarting" in note


async def test_cold_start_fails_on_a_forbidden_line_and_quotes_it():
    bad = "[TP2] RuntimeError: CUDA error 801: operation not supported"
    rig = at_cold_start(script=timeline(START, *MILESTONES[:4], bad, *MILESTONES[4:], READY))
    [(event, note, to)] = await rig.step()
    assert event == "fail"
    assert "CUDA error 801" in note and bad in note


async def test_resumed_cold_start_reads_the_whole_start_on_its_first_poll():
    # the runner resumes 40 minutes into the start: the milestones scrolled far above the last 200 lines
    noise = [f"Decode batch. #running-req: 0, #token: {i}, gen throughput (token/s): {i % 97}.0" for i in range(1500)]
    rig = at_cold_start(log=[START, *MILESTONES, *noise, READY])
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.relay-dry-run"), note
    assert rig.compose.log_tails[0] == COLD_START_WINDOW
    assert rig.clock.now == 0.0  # decided on the first poll


def test_the_expected_rank_budget_is_the_runbooks():
    assert f"rank_budget_bytes={RANK_BUDGET}" in MILESTONES[0]


# -- rule 12 --------------------------------------------------------------------------------------

def at_soak(*, yes: bool = True) -> Rig:
    """r2's soak: the new r2 and r1 (previous file) both run."""
    rig = Rig(state="r2.soak", ctx=ctx_at(), yes=yes)
    rig.compose.run(NEW_R2, file=RB.file, tag=TAG, started=-600.0)
    rig.compose.run(R1)
    return rig


def restart(kind: str, service: str):
    def hook(compose):
        if compose.clock.now >= 600 and not getattr(hook, "done", False):
            hook.done = True
            c = compose.host[service]
            if kind == "uptime":
                c.started = compose.clock.now  # `Up` went back: restarted in place
            elif kind == "id":
                compose.run(service, file=c.file, tag=c.tag, started=compose.clock.now)
            else:
                c.state = "restarting"
    return hook


@pytest.mark.parametrize("service", [NEW_R2, R1], ids=["new-r2", "r1"])
@pytest.mark.parametrize("kind,says", [("uptime", "restarted"), ("id", "replaced"), ("restarting", "restarting")])
async def test_soak_fails_when_an_engine_restarts(service, kind, says):
    rig = at_soak()
    rig.compose.on_ps = restart(kind, service)
    [(event, note, to)] = await rig.step()
    assert event == "fail" and to == "r2.rollback.relay-stop"
    assert service in note and says in note
    assert rig.clock.now < 1800


async def test_soak_passes_when_both_engines_keep_running():
    rig = at_soak()
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r1.stop-old"), note
    assert rig.clock.now == pytest.approx(1800, abs=rig.poll)


class Crash(Exception):
    pass


async def test_resumed_soak_continues_the_journaled_time():
    rig = at_soak()

    def crash(compose):
        if compose.clock.now >= 1000:
            raise Crash()

    rig.compose.on_ps = crash
    with pytest.raises(Crash):
        await rig.step()
    soaked = rig.record().context["soaks"]["r2.soak"]
    assert 900 <= soaked <= 1000  # journaled at least once a minute
    rig.compose.on_ps = None
    rig.resume()
    t0 = rig.clock.now
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r1.stop-old"), note
    assert rig.clock.now - t0 <= 1800 - soaked + rig.poll


async def test_an_approval_in_the_journal_is_not_waited_for_again():
    rig = at_soak(yes=False)
    rig.journal.approve(rig.run.run_id, "r2.soak", by="alice")
    rig.clock.limit = 4000
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r1.stop-old") and "approved" in note
    assert rig.clock.now == pytest.approx(1800, abs=rig.poll)


async def test_without_an_approval_the_soak_waits_for_one():
    rig = at_soak(yes=False)
    rig.clock.limit = 4000
    with pytest.raises(ClockLimit):
        await rig.step()


async def test_an_approval_in_the_journal_is_not_asked_for_again():
    rig = at_soak(yes=False)
    rig.journal.approve(rig.run.run_id, "r2.soak", by="alice")
    rig.clock.limit = 4000
    await rig.step()
    waiting = [f["gate"] for kind, f in rig.progress.events if kind == "waiting"]
    assert waiting and not any("orchestrate approve" in g for g in waiting), waiting


async def test_resumed_soak_fails_when_an_engine_was_replaced_while_the_runner_was_down():
    rig = at_soak()
    rig.ctx.ready[NEW_R2] = rig.compose.host[NEW_R2].id  # what its cold start recorded
    rig.ex.rt.save_context()

    def crash(compose):
        if compose.clock.now >= 1000:
            raise Crash()

    rig.compose.on_ps = crash
    with pytest.raises(Crash):
        await rig.step()
    rig.compose.on_ps = None
    rig.compose.run(NEW_R2, file=RB.file, tag=TAG, started=rig.clock.now)  # replaced (e.g. OOM-killed, recreated)
    rig.clock.now += 300  # the runner is down for five minutes
    rig.resume()
    [(event, note, to)] = await rig.step()
    assert event == "fail", f"the soak passed: {note}"


async def test_approve_now_ends_the_rest_of_the_soak():
    """`orchestrate approve RUN --now` journals `<gate>!now`: the soak ends at once, approved.
    Mutation: soak's `ended_early` (drop the `!now` check) -> the soak waits its full 30 min."""
    from orchestrator.service import signals as commands

    rig = at_soak(yes=False)
    commands.approve(rig.journal, rig.journal.get_run(rig.run.run_id), "r2.soak", "alice", now=True)
    [(event, note, to)] = await rig.step()
    assert event == "ok" and "ended early" in note, note
    assert rig.clock.now < 1800  # well before the 30-minute soak


async def test_a_resumed_cold_start_whose_start_scrolled_out_halts_instead_of_timing_out():
    """The review's finding 6: more log lines since the start than the first window holds means
    the milestones are out of reach; the gate halts (nothing stopped) instead of waiting out its
    50 minutes and rolling back a possibly healthy engine.
    Mutation: gates.py ColdStart, the first-poll `halt` removed -> the gate fails on its timeout."""
    rig = at_cold_start(log=["[2026-11-30 10:00:00 TP0] Decode batch, #running-req: 3"] * 4500)
    rig.clock.limit = 4000
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED") and "scrolled out" in note, note
    assert rig.compose.sent("down") == []


# -- the soak's log watch (steps/gates.py:ForbiddenLines) -------------------------------------------
# Mutation list: `if problem is None and logs is not None: problem = await logs.problem()` removed ->
# test_soak_fails_on_a_forbidden_line_logged_during_it[...] fail (the soak passes); in
# ForbiddenLines.problem, `continue  # the baseline` made to judge the first read ->
# test_an_old_forbidden_line_of_an_engine_not_started_in_this_run_is_history fails; the
# `lines[ready[-1] + 1:]` cut removed -> test_a_forbidden_line_before_the_ready_line_is_the_cold
# _start_s fails; the cut made to `[]` -> test_a_forbidden_line_after_the_ready_line_before_the_soak
# _counts fails.

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


@pytest.mark.parametrize("service", [NEW_R2, R1], ids=["new-r2", "r1"])
async def test_soak_fails_on_a_forbidden_line_logged_during_it(service):
    rig = at_soak()
    rig.ctx.ready[NEW_R2] = rig.compose.host[NEW_R2].id
    rig.compose.host[service].script = [(700.0, OOM)]
    [(event, note, to)] = await rig.step()
    assert event == "fail" and to == "r2.rollback.relay-stop"
    assert service in note and "forbidden line" in note and "OutOfMemoryError" in note
    assert 700 <= rig.clock.now < 800


async def test_a_forbidden_line_after_the_ready_line_before_the_soak_counts():
    rig = at_soak()
    rig.compose.host[NEW_R2].log.append(OOM)  # logged during the relay checks, before the soak
    rig.ctx.ready[NEW_R2] = rig.compose.host[NEW_R2].id
    [(event, note, to)] = await rig.step()
    assert event == "fail" and NEW_R2 in note and "OutOfMemoryError" in note


async def test_a_forbidden_line_before_the_ready_line_is_the_cold_starts():
    rig = at_soak()
    c = rig.compose.host[NEW_R2]
    c.log = [c.log[0], "[TP1] CUDA out of memory (retried with a smaller graph)", *c.log[1:]]
    rig.ctx.ready[NEW_R2] = c.id
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r1.stop-old"), note


async def test_an_old_forbidden_line_of_an_engine_not_started_in_this_run_is_history():
    rig = at_soak()
    rig.compose.host[R1].log.append(OOM)  # days ago, handled; r1 was not started by this run
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r1.stop-old"), note


# -- the soak's metrics watch (steps/gates.py:SoakGaugeWatch) ---------------------------------------
# Mutation list: `if problem is None and gauges is not None: problem = await gauges.problem()`
# removed -> test_soak_fails_when_a_watched_gauge_leaves_its_bounds fails (the soak passes);
# `if self.misses[...] >= self.MISSES` made `if False` -> test_a_relay_that_stays_unreadable_fails
# _the_soak fails; made `if True` -> test_a_relay_blip_is_tolerated fails.

QUEUE = "sglang:num_queue_reqs"


def metrics_soak(values, *, errors=()):
    """r2's soak watching the queue gauge through :8009; `values` by poll, `errors` polls that fail."""
    from orchestrator.language.runbook import GaugeBound, RelaySpec, SoakGauges

    soak = RB.phase("r2").steps[-1]
    assert soak.soak is not None
    spec = soak.soak.model_copy(update={"metrics": [SoakGauges(relay=RelaySpec(port=8009, token_variable="PROXY_TOKEN"),
                                                                gauges=[GaugeBound(name=QUEUE, max=8)])]})
    rb = RB.model_copy(update={"phases": [p.model_copy(update={"steps": [*p.steps[:-1], soak.model_copy(update={"soak": spec})]})
                                          if p.name == "r2" else p for p in RB.phases]})
    rig = Rig(state="r2.soak", ctx=ctx_at(), rb=rb)
    rig.compose.run(NEW_R2, file=RB.file, tag=TAG, started=-600.0)
    rig.compose.run(R1)
    reads = {"n": 0}

    class Relay:
        async def metrics_text(self):
            i = reads["n"]
            reads["n"] += 1
            if i in errors:
                raise ConnectionError("relay :8009 refused")
            v = values[min(i, len(values) - 1)]
            return f"# TYPE {QUEUE} gauge\n{QUEUE}{{model_name=\"m\"}} {v}\n"

    rig.use(relay=lambda url, token: Relay())
    return rig


async def test_soak_fails_when_a_watched_gauge_leaves_its_bounds():
    rig = metrics_soak([0, 1, 3, 12])
    [(event, note, to)] = await rig.step()
    assert event == "fail" and to == "r2.rollback.relay-stop"
    assert QUEUE in note and "12" in note


async def test_a_relay_blip_is_tolerated():
    rig = metrics_soak([0], errors=(2, 3))
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r1.stop-old"), note


async def test_a_relay_that_stays_unreadable_fails_the_soak():
    rig = metrics_soak([0], errors=(2, 3, 4))
    [(event, note, to)] = await rig.step()
    assert event == "fail" and "could not be read 3 times in a row" in note
