"""The compose steps (dry run, up) and the journaling of every mutating call.

Mutation list (each guard was disabled in the source, the test run and seen failing, the source
restored):
- rule 1  runtime.py:ComposeCalls.mutate, `record_intent(...)` before `await call(req, env)`: moved after
          the call -> test_every_mutating_call_is_journaled_before_and_after fails (no open intent
          at send time); `record_outcome(...)` deleted -> same test fails (effects without outcome).
- rule 2  steps/compose.py:up, `if checked is None or (...) != (...): return halt(...)` removed
          -> test_up_without_a_checked_dry_run_halts* fail (RETRY instead of HALT).
- rule 3  steps/compose.py:up, the `checked.after != now` comparison removed -> the up is sent,
          test_containers_changed_since_the_dry_run_* fail; _again `used < retry_cap` made
          always true -> the capped test fails (RETRY again instead of FAIL).
- rule 4  steps/compose.py:up, `if not rt.same_as_checked(req, env)` removed -> the up is sent
          with the new env map, test_env_map_changed_since_the_dry_run_* fails.
- rule 5  runtime.py:ComposeCalls.dry_run, `if changed: return DryRunCall("changed", halt(...))` made
          `if False` -> test_a_dry_run_that_changes_docker_ps_halts fails (OK instead of HALT).
- rule 5b runtime.py:ComposeCalls.dry_run after a failed attempt: `if changed or any(...)` made
          `if False` -> test_a_failed_dry_run_that_*_halts fail (retried, then OK);
          the state clause alone removed -> ..._moved_a_container_state_halts fails.
- rule 6  dry_run_check.py:judge_dry_run, `if removed: return DryRunJudgement("refuse", ...)` removed -> the
          up is applied, test_a_plan_that_removes_anything_is_never_applied fails.
- rule 7  steps/compose.py:up, `recorded = rt.recorded_effect("compose_up")` -> `None`
          -> test_resumed_up_*_applied_moves_on fails (RETRY: re-planned instead of OK).
- rule 8  runtime.py:Waits.settle_up, the `if in_flight is False:` branch removed ->
          test_unknown_up_with_nothing_in_flight_* fail (waits SETTLE_S / HALT instead of deciding
          at once); steps/compose.py:_judge, `settle_up(...)` replaced by "not_applied" ->
          test_unknown_up_with_nothing_in_flight_and_changed_ps_is_applied fails.
- rule 9  steps/compose.py:down and _judge, the `if outcome.get("lock_held")` branches removed ->
          test_a_stop_refused_for_the_lock_halts_and_stops_nothing_healthy fails (FAIL into r1's
          rollback, which stops the healthy new r1) and ..._sidecar_up_refused_... fails likewise;
          the `not any(rt.rb.replica_of(...))` clause removed ->
          test_an_engine_up_refused_for_the_lock_fails_into_the_rollback fails (HALT);
          runtime.py:ComposeCalls.dry_run_or_halt, the `except Busy` removed -> test_a_dry_run_refused_for_the_lock_halts
          fails (FAIL); runtime.py:Waits.wait_gone, a `lock_held` check after a resend removed ->
          test_a_down_sent_again_and_refused_for_the_lock_halts fails (resent, then FAIL); loop.py,
          `retry_at` always "" -> the retry_at assertions fail.
- bug     runtime.py:Waits.settle_up checks the SETTLE_S deadline even while `status()` says the up
          is in flight: test_unknown_up_still_in_flight_is_waited_for_not_replanned was xfail(strict) until the executor was fixed; it passes now.
"""

from __future__ import annotations

import pytest

from fakes import ENV, NEW_R2, R1, RB, RELAY, TAG, Rig, ctx_at, host_before
from orchestrator.engine.context import DryRunRecord
from orchestrator.engine.executor.runtime import SETTLE_S
from orchestrator.hosts.clients.compose_manager import StreamOutcome
from orchestrator.hosts.clients.errors import Busy
from orchestrator.hosts.envmap import EnvMap
from orchestrator.hosts.parsers.compose_manager_reads import InFlight


class Crash(Exception):
    """The runner dies right here (after the host got the request)."""


def at_dry_run(**kw) -> Rig:
    """r2's dry run is next: the old r2 is stopped, r1 serves on the previous file."""
    rig = Rig(state="r2.dry-run", ctx=ctx_at(), **kw)
    rig.compose.run(R1)
    return rig


async def at_apply(**kw) -> Rig:
    rig = at_dry_run(**kw)
    assert [e for e, _, _ in await rig.step()] == ["ok"]
    assert rig.ctx.checked_dry_run is not None
    return rig


# -- rule 1 ---------------------------------------------------------------------------------------

async def test_every_mutating_call_is_journaled_before_and_after():
    rig = Rig()
    host_before(rig.compose)
    at_send = []

    def check_intent(verb, req, env):
        if verb in ("up", "down"):
            open_ = rig.journal.open_effects(rig.run.run_id)
            at_send.append([(e.kind, e.mutating, e.request["request"]["services"]) for e in open_])
        return None

    rig.compose.on_send = check_intent
    final = await rig.run_to_end()
    assert final.outcome == "DONE", final.message
    sends = [(v, r) for v, r, _ in rig.compose.calls if v in ("up", "down")]
    assert len(sends) == len(at_send) >= 8
    for (verb, req), seen in zip(sends, at_send):
        # exactly one open intent when the request leaves: this one
        assert seen == [(f"compose_{verb}", True, list(req.services))]
    mutating = rig.effects(mutating=True)
    assert len(mutating) == len(sends)
    assert all(e.outcome is not None and e.outcome["status"] == "success" for e in mutating)
    assert rig.journal.open_effects(rig.run.run_id) == []
    # dry runs are reads: journaled after the fact, never as an open intent
    assert len(rig.effects(mutating=False)) == len(rig.compose.sent("dry_run"))  # placement's and the targets' too


# -- rule 2 ---------------------------------------------------------------------------------------

async def test_up_without_a_checked_dry_run_halts_and_sends_nothing():
    rig = Rig(state="r2.apply", ctx=ctx_at())
    rig.compose.run(R1)
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED")
    assert "no checked dry run" in note
    assert rig.compose.calls == [] and rig.effects() == []


async def test_up_after_a_dry_run_of_another_request_halts():
    other = DryRunRecord(tag=TAG, file=RB.file, services=[RELAY], project=None, env_fingerprint=ENV.fingerprint())
    rig = Rig(state="r2.apply", ctx=ctx_at(checked_dry_run=other))
    rig.compose.run(R1)
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED")
    assert rig.compose.calls == []


# -- rule 3 ---------------------------------------------------------------------------------------

async def test_containers_changed_since_the_dry_run_retries_then_fails_at_the_cap():
    rig = await at_apply()
    cap = rig.table.retry_cap("r2.apply")
    assert cap == 1
    for attempt in range(cap):
        rig.compose.run(R1)  # r1 recreated behind our back (new ID)
        [(event, note, to)] = await rig.step()
        assert (event, to) == ("retry", "r2.dry-run"), note
        assert "containers changed" in note
        assert rig.ctx.retries["r2.apply"] == attempt + 1
        assert [e for e, _, _ in await rig.step()] == ["ok"]  # planned again
    rig.compose.run(R1)
    [(event, note, to)] = await rig.step()
    assert event == "fail" and to == "r2.rollback.relay-stop", note
    assert rig.compose.sent("up") == []


async def test_containers_unchanged_since_the_dry_run_is_applied():
    rig = await at_apply()
    [(event, _, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.cold-start")
    assert [r.services for r in rig.compose.sent("up")] == [(NEW_R2,)]


# -- rule 4 ---------------------------------------------------------------------------------------

async def test_env_map_changed_since_the_dry_run_retries_and_never_sends_the_new_env_unchecked():
    changed = EnvMap({**ENV, "HF_TOKEN": "hf_R0tatedValue9876543210"})
    rig = await at_apply(env=(ENV, changed))
    rig.resume()  # the runner restarts; the dashboard now has the rotated token
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("retry", "r2.dry-run")
    assert "env map changed" in note
    assert rig.compose.sent("up") == []
    # planned again with the new map, then applied with it
    assert [e for e, _, _ in await rig.step(2)] == ["ok", "ok"]
    verbs = [(v, env.fingerprint()) for v, _, env in rig.compose.calls]
    assert verbs == [("dry_run", ENV.fingerprint()), ("dry_run", changed.fingerprint()), ("up", changed.fingerprint())]


# -- rule 5 ---------------------------------------------------------------------------------------

async def test_a_dry_run_that_changes_docker_ps_halts():
    rig = at_dry_run()

    def acts_for_real(verb, req, env):
        if verb == "dry_run":
            rig.compose.run(R1)  # docker/compose#14029: the "dry run" recreated r1
        return None

    rig.compose.on_send = acts_for_real
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED")
    assert "14029" in note and R1 in note
    assert rig.ctx.checked_dry_run is None
    assert rig.compose.sent("up") == []


def _fails_once(rig: Rig, then) -> None:
    from orchestrator.hosts.clients.errors import ServerError

    seen = []

    def send(verb, req, env):
        if verb == "dry_run" and not seen:
            seen.append(req)
            then()
            raise ServerError("compose-manager", "HTTP 502: bad gateway", status=502)
        return None

    rig.compose.on_send = send


async def test_a_failed_dry_run_that_changed_docker_ps_halts():
    rig = at_dry_run()
    _fails_once(rig, lambda: rig.compose.run(R1))  # the failed "dry run" recreated r1 for real
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED") and "failed also changed" in note and R1 in note, note
    assert len(rig.compose.sent("dry_run")) == 1 and rig.compose.sent("up") == []


async def test_a_failed_dry_run_that_moved_a_container_state_halts():
    rig = at_dry_run()
    rig.compose.host[R1].state = "restarting"  # came back during the failed attempt: not what was planned against
    _fails_once(rig, lambda: setattr(rig.compose.host[R1], "state", "running"))
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED") and "container states" in note, note


# -- rule 6 ---------------------------------------------------------------------------------------

async def test_a_plan_that_removes_anything_is_never_applied():
    rig = at_dry_run()
    # compose-manager's --remove-orphans would stop the serving r1
    rig.compose.extra_lines = [f" ✔ DRY-RUN MODE -  Container {R1}  Removed  0.0s"]
    [(event, note, to)] = await rig.step()
    assert event == "fail" and "removes" in note and R1 in note
    assert rig.ctx.checked_dry_run is None
    final = await rig.run_to_end()  # the rollback's dry run removes r1 too: refused as well
    assert final.outcome == "HALTED"
    assert rig.compose.sent("up") == [] and rig.compose.sent("down") == []


# -- rule 7 ---------------------------------------------------------------------------------------

async def crash_during_up(*, reached_host: bool) -> Rig:
    rig = await at_apply()

    def crash(verb, req, env):
        if verb == "up":
            if reached_host:
                rig.compose.apply(req)
            raise Crash()
        return None

    rig.compose.on_send = crash
    with pytest.raises(Crash):
        await rig.step()
    [eff] = rig.effects(mutating=True)
    assert eff.kind == "compose_up" and eff.outcome is None  # intent journaled, outcome never
    rig.compose.on_send = None
    rig.resume()
    return rig


async def test_resumed_up_that_applied_moves_on_without_sending_again():
    rig = await crash_during_up(reached_host=True)
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.cold-start"), note
    assert len(rig.compose.sent("up")) == 1  # only the one before the crash
    assert len(rig.compose.sent("dry_run")) == 1  # not re-planned
    assert NEW_R2 in rig.ctx.deployed
    [eff] = rig.effects(mutating=True)
    assert eff.outcome is not None and eff.outcome["status"] == "unknown"


async def test_resumed_up_that_did_not_apply_goes_back_to_its_dry_run_without_sending():
    rig = await crash_during_up(reached_host=False)
    t0 = rig.clock.now
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("retry", "r2.dry-run"), note
    assert len(rig.compose.sent("up")) == 1
    assert rig.clock.now - t0 >= SETTLE_S  # no GET /status: observed for SETTLE_S first


# -- rule 8 ---------------------------------------------------------------------------------------

async def unknown_up(*, applied: bool) -> Rig:
    rig = await at_apply()

    async def status():
        return None  # compose-manager: nothing in flight

    def broken_stream(verb, req, env):
        if verb == "up":
            if applied:
                rig.compose.apply(req)
                rig.compose.actions.pop()  # not in the action log (yet): docker/ps must decide
            return StreamOutcome("unknown", None, [], error="the stream ended without its done line")
        return None

    rig.compose.status = status
    rig.compose.on_send = broken_stream
    return rig


async def test_unknown_up_with_nothing_in_flight_and_ps_unchanged_retries():
    rig = await unknown_up(applied=False)
    t0 = rig.clock.now
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("retry", "r2.dry-run"), note
    assert "did not take effect" in note
    assert len(rig.compose.sent("up")) == 1  # not resent blindly
    assert rig.clock.now - t0 < SETTLE_S / 10  # decided at once: compose-manager said nothing runs


async def test_unknown_up_with_nothing_in_flight_and_changed_ps_is_applied():
    rig = await unknown_up(applied=True)
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.cold-start"), note
    assert len(rig.compose.sent("up")) == 1
    assert NEW_R2 in rig.ctx.deployed


async def test_unknown_up_still_in_flight_is_waited_for_not_replanned():
    rig = await at_apply()
    t0 = rig.clock.now

    async def status():
        return {"operation": "compose_up"} if rig.clock.now < t0 + 900 else None

    def lands_late(compose):
        if rig.clock.now >= t0 + 800 and NEW_R2 not in compose.host:
            compose.apply(rig.compose.sent("up")[0])

    rig.compose.status = status
    rig.compose.on_send = lambda verb, req, env: (
        StreamOutcome("unknown", None, [], error="read timeout") if verb == "up" else None)
    rig.compose.on_ps = lands_late
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.cold-start"), note
    assert len(rig.compose.sent("up")) == 1


async def test_an_abort_waits_until_the_call_in_flight_is_settled():
    """The review's finding: an abort requested while an up's outcome is unknown must not jump
    ahead of settling it (the rollback would act beside a call that may still be running).
    Mutation: loop.py run_to_end, the open-effect check before check_abort removed -> fails."""
    rig = await crash_during_up(reached_host=True)
    rig.journal.request_abort(rig.run.run_id, by="alice")
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.cold-start"), note  # settled (it took effect) first
    assert len(rig.compose.sent("up")) == 1


async def test_an_abort_does_not_land_while_an_unknown_up_is_being_settled():
    """The final review: the settle's waits are not abort points (an abort there would start the
    rollback beside an up that may still run). Mutation: `abortable=False` dropped from
    Waits.settle_up's waits -> the step ends in `abort` instead of settling."""
    rig = await crash_during_up(reached_host=False)
    rig.journal.request_abort(rig.run.run_id, by="alice")
    [(event, note, to)] = await rig.step()
    assert event == "retry", (event, note)  # settled: it did not take effect, so plan again
    assert len(rig.compose.sent("up")) == 1


# -- rule 9 ---------------------------------------------------------------------------------------

def _lock_held_by_another(rig: Rig, verb_of: str) -> None:
    """compose-manager answers every `verb_of` call 409 and `GET /status` names another client's
    up: its lock is held for ever (past the runbook's `timeouts.gone`, which the fake clock
    reaches without waiting)."""
    def refuse(verb, req, env):
        if verb == verb_of:
            raise Busy("compose-manager", "another docker operation is already in progress: compose_up",
                       in_flight="compose_up")
        return None

    async def status():
        return InFlight("compose_up", started_at="2026-12-05T03:00:00Z", file=RB.file)

    rig.compose.on_send = refuse
    rig.compose.status = status


async def test_a_stop_refused_for_the_lock_halts_and_stops_nothing_healthy():
    """r1's relay-stop after the new r1 passed its gates: the refused down changed nothing and says
    nothing of r1, so the run halts there; failing it would run r1's rollback, whose stop-new
    stops the healthy r1 this phase started."""
    rig = Rig(state="r1.relay-stop", ctx=ctx_at())
    r1 = rig.compose.run(R1, file=RB.file, tag=TAG)
    rig.compose.run(NEW_R2, file=RB.file, tag=TAG)
    rig.compose.run(RELAY, file=RB.file, tag=TAG)
    rig.ctx.created[r1.id] = {"service": R1, "state": "r1.apply"}
    rig.ex.rt.save_context()
    _lock_held_by_another(rig, "down")
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED"), (event, note, to)
    assert "lock stayed held by another operation past 10m" in note, note
    assert "the down of glm53-soak-relay was refused and did nothing" in note, note
    assert [r.services for r in rig.compose.sent("down")][-1] == (RELAY,)
    assert rig.compose.host[R1].id == r1.id and RELAY in rig.compose.host
    # `resume --retry` sends the refused down again at this step, never at the phase's stop-old
    assert rig.ex.ctx.failure is not None and rig.ex.ctx.failure.retry_at == "r1.relay-stop"


async def test_a_down_sent_again_and_refused_for_the_lock_halts():
    """The first down of the relay had no effect; its resend is refused for the lock: a halt at
    this step, as for the first down (failing would run r1's rollback, stopping the healthy r1)."""
    rig = Rig(state="r1.relay-stop", ctx=ctx_at())
    r1 = rig.compose.run(R1, file=RB.file, tag=TAG)
    rig.compose.run(NEW_R2, file=RB.file, tag=TAG)
    rig.compose.run(RELAY, file=RB.file, tag=TAG)
    sends = []

    def first_ignored_then_locked(verb, req, env):
        if verb != "down":
            return None
        sends.append(req)
        if len(sends) == 1:  # accepted, but the container stays (no observable effect)
            return StreamOutcome("failure", 1, ["Error response from daemon"])
        raise Busy("compose-manager", "another docker operation is already in progress: compose_up", in_flight="compose_up")

    async def status():
        return InFlight("compose_up", started_at="2026-12-05T03:00:00Z", file=RB.file)

    rig.compose.on_send = first_ignored_then_locked
    rig.compose.status = status
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED"), (event, note, to)
    assert "the down of glm53-soak-relay sent again was refused and did nothing" in note, note
    assert rig.compose.host[R1].id == r1.id and RELAY in rig.compose.host


async def test_a_dry_run_refused_for_the_lock_halts():
    """r1's relay dry run after the new r1 passed its gates: a dry run that never ran fails no
    replica's gate (failing it would run r1's rollback, which stops the healthy new r1)."""
    rig = Rig(state="r1.relay-dry-run", ctx=ctx_at())
    r1 = rig.compose.run(R1, file=RB.file, tag=TAG)
    rig.compose.run(NEW_R2, file=RB.file, tag=TAG)
    _lock_held_by_another(rig, "dry_run")
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED"), (event, note, to)
    assert "the dry run of glm53-soak-relay was refused and did nothing" in note, note
    assert rig.compose.sent("up") == [] and rig.compose.host[R1].id == r1.id
    assert rig.ex.ctx.failure is not None and rig.ex.ctx.failure.retry_at == "r1.relay-dry-run"


async def test_a_sidecar_up_refused_for_the_lock_halts():
    rig = Rig(state="r1.relay-dry-run", ctx=ctx_at())
    rig.compose.run(R1, file=RB.file, tag=TAG)
    rig.compose.run(NEW_R2, file=RB.file, tag=TAG)
    _lock_held_by_another(rig, "up")
    events = await rig.step(2)
    assert [(e, to) for e, _, to in events] == [("ok", "r1.relay-up"), ("halt", "HALTED")], events
    assert "the up of glm53-soak-relay was refused and did nothing" in events[-1][1], events
    # an up is sent only after its own dry run: `resume --retry` starts there
    assert rig.ex.ctx.failure is not None and rig.ex.ctx.failure.retry_at == "r1.relay-dry-run"


async def test_an_engine_up_refused_for_the_lock_fails_into_the_rollback():
    """The old r2 is stopped: a refused up of the new r2 fails the gate, so the rollback brings
    the old r2 back (halting would leave the replica empty)."""
    rig = await at_apply()
    _lock_held_by_another(rig, "up")
    events = await rig.step()
    assert events[0][0] == "fail" and "did not run the up" in events[0][1], events
