"""A cold-start gate's remedy (runbook.Remedy) on the base tier's DistStoreError, through the real
loop, journal and handlers on the fake host.

The base tier starts both W4AFP8 engines in one up; an engine whose ranks fail with DistStoreError
(the simulator's `dist-store-error:rN`: its first start logs it, then hangs) is restarted alone,
after its sibling serves (base-tier-runbook.md section 5 step 3), instead of the host's rollback.

Rules pinned here, and the mutation each was checked with (guard deleted in the source, the test
run and seen failing, the source restored):
- R1 steps/gates.py:_failed_on_line, `if hit is None: return fail(why)` removed
     -> test_another_forbidden_line_fails_the_gate_as_before fails (REMEDY on an NCCL error);
     the record cut to its first line (`record = [res.line]`) -> test_a_traceback_whose_last_line_is
     _the_dist_store_error_takes_the_remedy[one-read] fails; the second read removed -> its
     `split` case fails (FAIL: the cause was not read yet);
- R2 steps/gates.py:_failed_on_line, `if used >= cap: return fail(...)` removed ->
     test_the_remedy_is_not_taken_past_its_cap and test_a_second_dist_store_error_after_the_remedy_fails
     fail (REMEDY again);
- R3 steps/gates.py:_failed_on_line, `rt.ctx.remedies[node.id] = used + 1` removed ->
     test_a_second_dist_store_error_after_the_remedy_fails and test_a_resume_inside_the_remedy_* fail
     (the count is what the journal carries);
- R4 steps/gates.py:cold_start, `return self._failed_on_line(...)` -> `return fail(...)` ->
     test_dist_store_error_takes_the_remedy_then_the_gate_passes_on_the_new_container fails;
- R5 steps/compose.py:up, the `checked is None ...: return halt(...)` guard removed ->
     test_the_remedy_up_needs_its_own_dry_run fails (the up is sent);
- R6 runtime.py:StopGuard.stop_guard, `return (f"refusing to stop {e}: ...")` made `return None`
     -> test_the_stop_guard_holds_inside_a_remedy fails (the down is sent);
- R7 steps/gates.py:cold_start, `if now is not None and now.id == ready_id:` made `if False:` ->
     test_a_sibling_whose_cold_start_passed_in_this_run_is_not_judged_again_from_a_scrolled_log fails (HALT).
"""

from __future__ import annotations

import pytest

from fakes import SECRETS, TAG, Rig
from orchestrator.engine.executor import RunContext
from orchestrator.language.machine import Event
from orchestrator.language.runbook import load_runbook

RB = load_runbook("base-glm53-w4afp8")
R1 = "model-sg-glm53-w4afp8-tp4-r1"
R2 = "model-sg-glm53-w4afp8-tp4-r2"
START = RB.log_gates.startup + "tp_size=4, ep_size=4)"
READY = RB.log_gates.required[0]
DSE = "[TP2] torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 3/4 clients joined."
GATE1, GATE2 = "switch.cold-start-r1", "switch.cold-start-r2"
REMEDY1 = [f"{GATE1}.remedy.{s}" for s in ("stop-r1", "wait-r2", "dry-run-r1", "start-r1")]
REMEDY2 = [f"{GATE2}.remedy.{s}" for s in ("stop-r2", "wait-r1", "dry-run-r2", "start-r2")]
ROLLBACK = "switch.rollback.perception-stop"
PREVIOUS = {s: {"tag": "v1", "file": "prod/GLM-5.3-Flash-SGL-TP4.yaml", "commit": ""} for s in RB.previous_refs()}


def after_apply(*, r1: list[str], r2: list[tuple[float, str]], state: str = GATE1, **ctx) -> Rig:
    """Both W4AFP8 engines were just started by the scoped up (`switch.apply`); `r1` is r1's log
    (then it hangs), `r2` r2's timeline. A restarted engine starts cleanly (the fault is the first
    start's)."""
    rig = Rig(rb=RB, host="gpu03", state=state, ctx=RunContext(previous=dict(PREVIOUS), **ctx))
    rig.compose.boot = lambda svc: [START, READY]
    rig.compose.run(R1, file=RB.file, tag=TAG, log=list(r1), started=0.0)
    rig.compose.run(R2, file=RB.file, tag=TAG, log=[], started=0.0).script = list(r2)
    return rig


R2_SERVES_AT_10_MIN = [(0.0, START), (600.0, READY)]


async def test_dist_store_error_takes_the_remedy_then_the_gate_passes_on_the_new_container():
    rig = after_apply(r1=[START, DSE], r2=R2_SERVES_AT_10_MIN)
    old_r1 = rig.compose.host[R1].id
    done = await rig.step(7)
    assert [(e, to) for e, _, to in done] == [
        ("remedy", REMEDY1[0]), ("ok", REMEDY1[1]), ("ok", REMEDY1[2]), ("ok", REMEDY1[3]), ("ok", GATE1),
        ("ok", GATE2), ("ok", "switch.markers-r1")]
    assert "DistStoreError" in done[0][1] and "taking the remedy for dist_store_error (1 of at most 1)" in done[0][1]
    # r1 alone: a scoped down, its dry run, its up, all of the new file at the rollout's tag
    [down] = rig.compose.sent("down")
    [dry] = rig.compose.sent("dry_run")
    [up] = rig.compose.sent("up")
    assert down.services == dry.services == up.services == (R1,)
    assert down.file == dry.file == up.file == RB.file and up.tag == TAG
    # only after its sibling served
    assert rig.clock.now >= 600.0
    assert rig.compose.host[R1].id != old_r1 and rig.ctx.ready[R1] == rig.compose.host[R1].id
    assert rig.ctx.remedies == {GATE1: 1}
    # journaled like any other step: the REMEDY transition, and every call's intent and outcome
    events = [(t.from_state, t.event) for t in rig.journal.transitions(rig.run.run_id)]
    assert (GATE1, "remedy") in events and (GATE1, "ok") in events
    assert [e.kind for e in rig.effects(mutating=True)] == ["compose_down", "compose_up"]
    assert all(e.outcome is not None for e in rig.effects(mutating=True))
    assert rig.record().context["remedies"] == {GATE1: 1}


async def test_r2s_remedy_waits_for_r1_then_restarts_r2_alone():
    # r1 passed its cold start; r2's first start fails with DistStoreError
    rig = after_apply(r1=[START, READY], r2=[(0.0, START), (300.0, DSE)], state=GATE2)
    done = await rig.step(6)
    assert [(e, to) for e, _, to in done] == [
        ("remedy", REMEDY2[0]), ("ok", REMEDY2[1]), ("ok", REMEDY2[2]), ("ok", REMEDY2[3]), ("ok", GATE2),
        ("ok", "switch.markers-r1")]
    assert [r.services for r in rig.compose.sent("down")] == [(R2,)]
    assert R1 in rig.compose.host and rig.compose.host[R1].log == [START, READY]  # r1 untouched


async def test_another_forbidden_line_fails_the_gate_as_before():
    rig = after_apply(r1=[START, "[TP1] NCCL error: unhandled system error"], r2=R2_SERVES_AT_10_MIN)
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("fail", ROLLBACK), note
    assert "NCCL error" in note and not rig.ctx.remedies
    assert not rig.compose.sent("down")


async def test_the_remedy_is_not_taken_past_its_cap():
    rig = after_apply(r1=[START, DSE], r2=R2_SERVES_AT_10_MIN, remedies={GATE1: 1})
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("fail", ROLLBACK), note
    assert "already taken 1 time(s) in this run, at most 1" in note
    assert not rig.compose.sent("down")


async def test_a_second_dist_store_error_after_the_remedy_fails():
    rig = after_apply(r1=[START, DSE], r2=R2_SERVES_AT_10_MIN)
    rig.compose.boot = lambda svc: [START, DSE]  # the restarted r1 fails the same way
    done = await rig.step(6)
    assert [(e, to) for e, _, to in done][-2:] == [("ok", GATE1), ("fail", ROLLBACK)]
    assert "already taken 1 time(s)" in done[-1][1]
    assert len(rig.compose.sent("down")) == 1


@pytest.mark.parametrize("bad", ["[TP0] RuntimeError: CUDA error: an illegal memory access was encountered", DSE])
async def test_a_failure_inside_the_remedy_takes_the_phases_rollback(bad):
    # r1 (which does not serve) is stopped; while its remedy waits for r2, r2 fails too (a
    # DistStoreError there is no remedy of r2's: the waiting step has none)
    rig = after_apply(r1=[START, DSE], r2=[(0.0, START), (300.0, bad)])
    done = await rig.step(3)
    assert [(e, to) for e, _, to in done] == [("remedy", REMEDY1[0]), ("ok", REMEDY1[1]), ("fail", ROLLBACK)]
    assert [r.services for r in rig.compose.sent("down")] == [(R1,)] and not rig.compose.sent("up")
    assert rig.ctx.failure is not None and rig.ctx.failure.state == REMEDY1[1]


async def test_the_remedy_up_needs_its_own_dry_run():
    # a resume that lands on the remedy's up with no checked dry run of that request halts, sends nothing
    rig = after_apply(r1=[START, DSE], r2=R2_SERVES_AT_10_MIN, state=REMEDY1[3])
    [(event, note, to)] = await rig.step()
    assert event == "halt" and "no checked dry run" in note
    assert not rig.compose.sent("up")


async def test_the_stop_guard_holds_inside_a_remedy():
    # with replicas declared, the remedy's down of an engine that serves while its sibling does not is refused
    rb = RB.model_copy(update={"replicas": {"r1": [R1], "r2": [R2]}})
    rig = Rig(rb=rb, host="gpu03", state=REMEDY1[0], ctx=RunContext(previous=dict(PREVIOUS)))
    rig.compose.run(R1, file=RB.file, tag=TAG, log=[START, READY], started=0.0)
    rig.compose.run(R2, file=RB.file, tag=TAG, log=[START, DSE], started=0.0)
    [(event, note, to)] = await rig.step()
    assert event == "halt" and "refusing to stop" in note
    assert not rig.compose.sent("down")


class Crash(Exception):
    """The runner dies right after the host got the request."""


async def test_a_resume_inside_the_remedy_settles_the_down_and_keeps_the_count():
    rig = after_apply(r1=[START, DSE], r2=R2_SERVES_AT_10_MIN)
    assert [e for e, _, _ in await rig.step(1)] == ["remedy"]  # at stop-r1 now
    real_down = rig.compose.down

    async def crashing_down(req, env):
        await real_down(req, env)  # the host stops r1 ...
        raise Crash()  # ... and the runner dies before it reads the answer

    rig.compose.down = crashing_down
    with pytest.raises(Crash):
        await rig.step()
    assert rig.record().state == REMEDY1[0]
    [eff] = rig.effects(mutating=True)
    assert eff.kind == "compose_down" and eff.outcome is None  # the intent was journaled before the call
    rig.compose.down = real_down
    rig.resume()  # what `orchestrate resume` does: a new executor from the journal
    assert rig.ctx.remedies == {GATE1: 1}  # the count came back from the journal
    done = await rig.step(6)
    assert [(e, to) for e, _, to in done] == [
        ("ok", REMEDY1[1]), ("ok", REMEDY1[2]), ("ok", REMEDY1[3]), ("ok", GATE1), ("ok", GATE2), ("ok", "switch.markers-r1")]
    assert len(rig.compose.sent("down")) == 1  # settled from docker/ps, never sent again


async def test_a_resume_at_the_gate_after_the_remedy_does_not_take_it_again():
    rig = after_apply(r1=[START, DSE], r2=R2_SERVES_AT_10_MIN)
    rig.compose.boot = lambda svc: [START, DSE]
    assert [e for e, _, _ in await rig.step(5)] == ["remedy", "ok", "ok", "ok", "ok"]
    rig.resume()
    assert rig.ex.machine.state == GATE1
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("fail", ROLLBACK), note


def test_the_table_sends_remedy_only_where_the_runbook_names_one():
    rig = after_apply(r1=[START], r2=[])
    assert rig.table.allows(GATE1, Event.REMEDY) and rig.table.allows(GATE2, Event.REMEDY)
    assert not any(rig.table.allows(s, Event.REMEDY) for s in rig.table.order if s not in (GATE1, GATE2))


async def test_a_sibling_whose_cold_start_passed_in_this_run_is_not_judged_again_from_a_scrolled_log():
    """R7: steps/gates.py:cold_start, the `ctx.ready` shortcut removed -> this test fails (HALT:
    r1's start scrolled out of the window while r2's remedy waits for it)."""
    noise = [f"Decode batch. #running-req: 0, #token: {i}" for i in range(6000)]
    rig = after_apply(r1=[START, READY, *noise], r2=[(0.0, START), (300.0, DSE)], state=GATE2)
    rig.ctx.ready[R1] = rig.compose.host[R1].id  # cold-start-r1 passed earlier in this run
    done = await rig.step(3)
    assert [(e, to) for e, _, to in done] == [("remedy", REMEDY2[0]), ("ok", REMEDY2[1]), ("ok", REMEDY2[2])], done
    assert "passed its cold start in this run" in done[2][1]


async def test_a_replaced_sibling_is_followed_again():
    # ctx.ready names an older container: the new one's start is judged from its log
    rig = after_apply(r1=[START, "[TP0] NCCL error: remote process exited"], r2=[(0.0, START), (300.0, DSE)], state=GATE2)
    rig.ctx.ready[R1] = "an-older-container"
    done = await rig.step(3)
    assert [(e, to) for e, _, to in done] == [("remedy", REMEDY2[0]), ("ok", REMEDY2[1]), ("fail", ROLLBACK)]


async def test_from_the_scoped_up_of_both_engines_to_the_markers_with_r2s_fault():
    """The simulator's `dist-store-error:r2`: r2's first start logs DistStoreError and hangs; a fresh
    container starts normally. From the main dry run to the step after both cold starts."""
    rig = Rig(rb=RB, host="gpu03", state="switch.dry-run", ctx=RunContext(previous=dict(PREVIOUS)))
    starts = {R1: 0, R2: 0}

    def boot(svc):
        if svc not in starts:
            return ["started"]
        starts[svc] += 1
        return [START, DSE] if (svc == R2 and starts[svc] == 1) else [START, READY]

    rig.compose.boot = boot
    done = await rig.step(13)
    assert [(e, to) for e, _, to in done] == [
        ("ok", "switch.apply"), ("ok", "switch.collector-dry-run"), ("ok", "switch.collector-up"), ("ok", GATE1), ("ok", GATE2),
        ("remedy", REMEDY2[0]), ("ok", REMEDY2[1]), ("ok", REMEDY2[2]), ("ok", REMEDY2[3]), ("ok", GATE2),
        ("ok", "switch.markers-r1"), ("ok", "switch.markers-r2"), ("ok", "switch.relay-dry-run")], done
    assert starts == {R1: 1, R2: 2}
    assert [(v, r.services) for v, r, _ in rig.compose.calls][-3:] == [("down", (R2,)), ("dry_run", (R2,)), ("up", (R2,))]
    assert rig.ctx.remedies == {GATE2: 1} and set(rig.ctx.ready) == {R1, R2}


# What SGLang really logs: one traceback whose first line is itself forbidden and whose last line
# names the cause (the shape of tests/data/reference/samples/sglang-failures.log).
TRACEBACK = [
    "[TP2] Scheduler hit an exception: Traceback (most recent call last):",
    '  File ".../sglang/srt/managers/scheduler.py", line 4546, in run_scheduler_process',
    "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)",
    '  File ".../torch/distributed/rendezvous.py", line 189, in _create_c10d_store',
    "    return TCPStore(",
    "torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 3/4 clients joined.",
]


@pytest.mark.parametrize("split", [False, True], ids=["one-read", "split"])
async def test_a_traceback_whose_last_line_is_the_dist_store_error_takes_the_remedy(split):
    if split:  # the cause arrives after the poll that saw the first line
        rig = after_apply(r1=[START], r2=R2_SERVES_AT_10_MIN)
        rig.compose.host[R1].script = [(0.0, TRACEBACK[0]), *((10.0, ln) for ln in TRACEBACK[1:])]
    else:
        rig = after_apply(r1=[START, *TRACEBACK], r2=R2_SERVES_AT_10_MIN)
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("remedy", REMEDY1[0]), note
    assert "Scheduler hit an exception" in note and "DistStoreError" in note


async def test_the_remedys_evidence_hides_a_secret_split_across_the_causes_line_and_the_one_before():
    # judged raw, quoted from the record scrubbed whole: neither half of the token is shown
    # (mutation: steps/logs.py quoting `rt.scrub(record[hit])` alone -> the tail is shown)
    secret = SECRETS["HF_TOKEN"]
    head, tail = secret[:10], secret[10:]
    log = [START, *TRACEBACK[:-2], f"{TRACEBACK[-2]} {head}", f"{tail} {TRACEBACK[-1]}"]
    rig = after_apply(r1=log, r2=R2_SERVES_AT_10_MIN)
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("remedy", REMEDY1[0]), note
    assert "DistStoreError" in note and head not in note and tail not in note and "***" in note, note
