"""The stop guard on every engine down, and what "serving" means.

Mutation list (each guard was disabled in the source, the test run and seen failing, the source
restored):
- rule 9  steps/compose.py:down, `if refusal: return halt(refusal)` removed -> the down is
          sent, test_down_of_the_last_serving_engine_halts_and_sends_nothing fails (and the
          rollback variant);
          runtime.py:StopGuard.stop_guard, `if any(v.serving for v in verdicts): continue` removed ->
          test_down_while_the_other_replica_serves_is_sent fails (HALT);
          runtime.py:StopGuard.stop_guard, `if not mine.serving: continue` removed ->
          test_down_of_an_engine_that_does_not_serve_is_sent fails (HALT).
- rule 10 runtime.py:Serving.serving, `if c.state != "running" or c.restarting` reduced to
          `c.state != "running"` / to `c.restarting` -> the `restarting` cases fail;
          `if last_start > last_ready` removed -> the "startup after ready" cases fail (also the
          stop-guard one); `if last_ready < 0` removed -> the "no ready and no startup line" case
          fails (with a startup line in the window the previous check already answers).
- bug     runtime.py:Waits.wait_gone resends a down without asking stop_guard again:
          test_a_resent_down_is_guarded_again was xfail(strict) until the executor was fixed; it passes now.
"""

from __future__ import annotations

import pytest

from fakes import NEW_R2, OLD_R2, R1, RB, READY, STARTUP, TAG, Rig, ctx_at, engine_log
from orchestrator.hosts.clients.compose_manager import StreamOutcome


def at_stop_old(*, r2_log: list[str], r1_log: list[str]) -> Rig:
    """r2's first step: stop the old FP8 r2 while r1 (the other replica) is supposed to serve."""
    rig = Rig(state="r2.stop-old", ctx=ctx_at())
    rig.compose.run(OLD_R2, log=r2_log)
    rig.compose.run(R1, log=r1_log)
    return rig


# -- rule 9 ---------------------------------------------------------------------------------------

async def test_down_of_the_last_serving_engine_halts_and_sends_nothing():
    rig = at_stop_old(r2_log=engine_log(), r1_log=engine_log(ready=False))  # r1 still cold-starting
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED")
    assert f"refusing to stop {OLD_R2}" in note and "Nothing was stopped" in note
    assert rig.compose.calls == [] and rig.effects() == []
    assert OLD_R2 in rig.compose.host


async def test_down_while_the_other_replica_serves_is_sent():
    rig = at_stop_old(r2_log=engine_log(), r1_log=engine_log())
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.dry-run"), note
    assert [r.services for r in rig.compose.sent("down")] == [(OLD_R2,)]


async def test_down_of_an_engine_that_does_not_serve_is_sent():
    # neither serves (the old r2 never logged its ready line): stopping it takes no capacity away
    rig = at_stop_old(r2_log=engine_log(ready=False), r1_log=engine_log(ready=False))
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.dry-run"), note
    assert [r.services for r in rig.compose.sent("down")] == [(OLD_R2,)]


async def test_down_when_the_other_replica_restarted_after_its_ready_line_halts():
    rig = at_stop_old(r2_log=engine_log(), r1_log=engine_log() + [STARTUP.format(api_key="")])
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED")
    assert "started again after its ready line" in note
    assert rig.compose.sent("down") == []


async def test_rollback_stop_of_the_only_serving_replica_halts():
    # `rollback --replica all` from a halted r1 phase: stopping the new r2 would leave nothing serving
    rig = Rig(state="rollback-r2.stop-new", ctx=ctx_at(), kind="rollback")
    rig.compose.run(NEW_R2, file=RB.file, tag=TAG)
    rig.compose.run(R1, file=RB.file, tag=TAG, log=engine_log(ready=False))
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED")
    assert rig.compose.sent("down") == []


# -- rule 10 --------------------------------------------------------------------------------------

SERVING_CASES = [
    # (case, state, status override, log, serving)
    ("running, ready", "running", None, engine_log(), True),
    ("running, no ready line", "running", None, engine_log(ready=False), False),
    # issue 21 case 11: a window without its start (docker's log rotation) is no evidence of a cold
    # start; here the peers route to the host and no other engine runs, so it is this one that serves
    ("running, no ready and no startup line in the window", "running", None, engine_log(ready=False)[1:], True),
    ("running, a startup after the ready line", "running", None, engine_log() + [STARTUP.format(api_key="")], False),
    ("running, ready after a second startup", "running", None, engine_log() + engine_log(), True),
    ("state restarting", "restarting", None, engine_log(), False),
    ("status Restarting", "running", "Restarting (137) 3 seconds ago", engine_log(), False),
    ("exited", "exited", None, engine_log(), False),
]


@pytest.mark.parametrize("case,state,status,log,serving", SERVING_CASES, ids=[c[0] for c in SERVING_CASES])
async def test_serving_means_ready_and_not_restarted_since(case, state, status, log, serving):
    rig = Rig(state="r2.stop-old", ctx=ctx_at())
    c = rig.compose.run(R1, log=log, state=state)
    c.status = status
    verdict = await rig.ex.rt.serving(R1)
    assert verdict.serving is serving, verdict.why


async def test_an_absent_engine_does_not_serve():
    rig = Rig(state="r2.stop-old", ctx=ctx_at())
    verdict = await rig.ex.rt.serving(R1)
    assert not verdict.serving and "not running" in verdict.why


def test_the_ready_and_startup_lines_are_the_runbooks():
    assert READY in engine_log() and RB.log_gates.startup == "server_args=ServerArgs("


async def test_a_resent_down_is_guarded_again():
    rig = at_stop_old(r2_log=engine_log(), r1_log=engine_log())
    downs = []

    def first_down_has_no_effect(verb, req, env):
        if verb == "down":
            downs.append(rig.clock.now)
            if len(downs) == 1:
                return StreamOutcome("unknown", None, [], error="read timeout")  # and nothing happened
        return None

    def r1_restarts(compose):
        if downs and R1 in compose.host and compose.host[R1].log[-1] == READY:
            compose.host[R1].log.append(STARTUP.format(api_key=""))  # r1 restarts: it no longer serves

    rig.compose.on_send = first_down_has_no_effect
    rig.compose.on_ps = r1_restarts
    [(event, note, to)] = await rig.step()
    assert len(rig.compose.sent("down")) == 1, "the down was resent while the old r2 was the only serving engine"
    assert (event, to) == ("halt", "HALTED")


# -- GPU claims (compose-manager's GET /host/gpu) -----------------------------------------------
# Mutation list: steps/compose.py:down
#   - `if others: return halt(...)` removed -> test_a_down_is_not_sent_while_another_engine_holds_its_gpus fails
#   - `if busy: return fail(...)` removed -> test_gpus_still_held_after_the_down_fail_the_gate fails
#   - the `& engines` filter removed -> test_the_dcgm_exporter_holding_every_gpu_is_not_an_engine fails


class _Gpu:
    def __init__(self, index, claimed_by):
        self.index, self.claimed_by = index, tuple(claimed_by)


def _gpus(rig, holders_by_index):
    async def host_gpu():
        return [_Gpu(i, holders_by_index(i)) for i in range(8)]
    rig.compose.host_gpu = host_gpu


async def test_a_down_is_not_sent_while_another_engine_holds_its_gpus():
    rig = at_stop_old(r2_log=engine_log(), r1_log=engine_log())
    _gpus(rig, lambda i: [OLD_R2, "model-sg-glm53-w4afp8-tp4-r1"] if i == 5 else ([OLD_R2] if i >= 4 else []))
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED") and "also held by model-sg-glm53-w4afp8-tp4-r1" in note, note
    assert rig.compose.sent("down") == []


async def test_the_dcgm_exporter_holding_every_gpu_is_not_an_engine():
    rig = at_stop_old(r2_log=engine_log(), r1_log=engine_log())
    rig.compose.run("dcgm-glm53", file=RB.file, tag=TAG, started=rig.clock.now)
    state = {"down": False}

    def holders(i):
        held = ["dcgm-glm53"]
        if i >= 4 and OLD_R2 in rig.compose.host:
            held.append(OLD_R2)
        return held
    _gpus(rig, holders)
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.dry-run"), note
    assert state == {"down": False}


async def test_gpus_still_held_after_the_down_fail_the_gate():
    rig = at_stop_old(r2_log=engine_log(), r1_log=engine_log())
    # a leftover engine container keeps GPU 6 after the old r2 is gone
    rig.compose.run("model-sg-glm53-w4afp8-tp4-r2", file=RB.file, tag=TAG, started=rig.clock.now)
    _gpus(rig, lambda i: ["model-sg-glm53-w4afp8-tp4-r2"] if i == 6 and OLD_R2 not in rig.compose.host
          else ([OLD_R2] if i >= 4 and OLD_R2 in rig.compose.host else []))
    [(event, note, to)] = await rig.step()
    assert event == "fail" and "GPU 6 by model-sg-glm53-w4afp8-tp4-r2" in note, note


# -- the review's findings (each test fails with its guard removed) ----------------------------
# Mutation list:
#   runtime.py:Serving.serving, the "long-running engine" branch removed -> test_a_long_running_*
#     fails (both engines' ready lines scrolled out: r2.stop-old halts, r1 counted as not serving)
#   runtime.py:StopGuard.stop_guard, `and not mine.unknown` removed -> test_an_engine_whose_start_*
#     fails (the down is sent without looking at r1)
#   runtime.py:StopGuard.stop_guard, the GET /status in-flight refusal removed -> test_a_stop_*_in_flight fails
#   loop.py:run_to_end, the open-effect check before check_abort removed -> tests/executor/test_compose_steps.py
#     test_an_abort_waits_until_the_call_in_flight_is_settled fails

NOISE = ["[2026-11-30 10:00:00 TP0] Decode batch, #running-req: 3"]


async def test_a_long_running_engine_whose_start_scrolled_out_still_serves():
    long_log = NOISE * 5000  # days of decode lines: no ready line, no startup line in the window
    rig = at_stop_old(r2_log=long_log, r1_log=long_log)
    rig.compose.host[OLD_R2].status = "Up 3 days"
    rig.compose.host[R1].status = "Up 3 days"
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.dry-run"), note
    assert [r.services for r in rig.compose.sent("down")] == [(OLD_R2,)]


async def test_an_engine_whose_start_scrolled_out_but_may_be_cold_starting_is_not_stopped_alone():
    long_log = NOISE * 5000
    rig = at_stop_old(r2_log=long_log, r1_log=engine_log(ready=False))  # r1 cold-starting
    rig.compose.host[OLD_R2].status = "Up 5 minutes"  # too young to rule out a cold start: unknown
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED"), note
    assert rig.compose.sent("down") == []


async def test_a_stop_while_compose_manager_reports_an_operation_in_flight_halts():
    rig = at_stop_old(r2_log=engine_log(), r1_log=engine_log())

    async def status():
        return object()  # an operation in flight
    rig.compose.status = status
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED") and "in flight" in note, note
    assert rig.compose.sent("down") == []


class Crash(Exception):
    """The runner process dies here."""


async def test_a_resend_in_flight_at_a_crash_is_settled_not_sent_again():
    """The review's finding 5: a crash while a down *resend* is in flight; the resume settles the
    newest down of the visit and counts the resends already sent.
    Mutation: compose.py down settling only the first down (`visit_effects(...)[0]`) -> the
    resend goes out again (3 downs instead of 2)."""
    rig = at_stop_old(r2_log=engine_log(), r1_log=engine_log())
    calls = {"n": 0}

    def on_send(verb, req, env):
        if verb != "down":
            return None
        calls["n"] += 1
        if calls["n"] == 1:  # the first down "fails" and leaves the container: a resend follows
            from orchestrator.hosts.clients.compose_manager import StreamOutcome
            return StreamOutcome("failure", 1, ["Error response from daemon: removal already in progress"])
        rig.compose.host.pop(OLD_R2, None)  # the resend takes effect ...
        raise Crash()                        # ... and the runner dies before journaling it

    rig.compose.on_send = on_send
    with pytest.raises(Crash):
        await rig.step()
    rig.compose.on_send = None
    rig.resume()
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.dry-run"), note
    assert len(rig.compose.sent("down")) == 2


async def test_an_engine_ready_in_this_run_serves_though_its_ready_line_scrolled_out():
    """The final review: an engine whose cold-start gate passed in this run (same container) and
    that logged no startup line since is serving, however busy its log. Mutation: the
    `ctx.ready` branch in Serving.serving removed -> r1 counts as unknown, the down halts."""
    long_log = NOISE * 5000
    rig = at_stop_old(r2_log=engine_log(), r1_log=long_log)
    rig.compose.host[R1].status = "Up 20 minutes"  # younger than a cold start
    rig.ctx.ready[R1] = rig.compose.host[R1].id
    rig.ex.rt.save_context()
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.dry-run"), note
