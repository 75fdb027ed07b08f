"""Runs own containers, not names (issue 21 case 6) and rollbacks judged by their target (case 9).

Mutation list (each guard was disabled in the source, the test run and seen failing, the source
restored):
- ledger  steps/compose.py:_judged, `await rt.record_ownership(..., up=True)` deleted ->
          test_a_rollout_records_what_it_created_and_stopped_by_container_id and
          test_the_ledger_survives_a_crash_after_the_ups_outcome fail (no created IDs);
          steps/compose.py:down, `await rt.record_ownership(..., up=False)` deleted -> that
          test, test_a_rollback_stops_the_engine_its_run_created and
          test_a_resumed_narrowed_down_waits_only_for_what_it_sent fail (no stopped IDs).
- owner   runtime.py:StopGuard.not_owned, `_, others = owned_split(...)` -> `others = []` ->
          test_a_rollback_never_stops_a_namesake_it_did_not_create fails (the old r1 is stopped).
- scope   runtime.py:StopGuard.not_owned, the `node.section not in ROLLBACK_SECTIONS` return removed ->
          test_a_forward_stop_of_the_old_engine_is_not_held_to_ownership fails (r2.stop-old refused);
          its `self.table.kind != "rollout"` exemption removed ->
          test_an_operators_rollback_run_stops_the_rolled_out_engine_it_did_not_create and
          tests/e2e/test_cli_e2e.py::test_whole_host_rollback_after_done_restores_both_r2_first fail (an operator's
          `orchestrate rollback` run owns nothing, yet must stop the rolled-out engines).
- engine  runtime.py:StopGuard.not_owned, `self.rb.replica_of(...) and` dropped ->
          test_a_rollback_leaves_a_sidecar_it_did_not_start_without_blaming_the_message fails
          (a previous relay left running would be reported as if it were an engine).
- message loop.py:Executor._final_message, `and event != Event.HALT` removed ->
          test_a_rollback_stop_refused_for_the_lock_is_told_as_it_is fails (the runbook's message).
- message loop.py:Executor._final_message, the `if self.ctx.not_stopped:` branch disabled ->
          test_a_rollback_never_stops_a_namesake_it_did_not_create fails (the runbook's halt text
          claims "The failing r1 was stopped").
- narrow  steps/compose.py:down, the resume path's `req = replace(req, services=sent)` deleted
          -> test_a_resumed_narrowed_down_waits_only_for_what_it_sent fails (it waits for the
          namesake it left running and fails).
- retry   context.py:RunContext.for_retry, `created=..., stopped=...` dropped ->
          test_a_retry_keeps_the_ledger_of_the_run_it_continues fails.
- budget  steps/compose.py:dry_run, the rollback branch (`not target_needs_budget(...)`)
          deleted -> test_a_rollback_to_the_previous_file_is_not_held_to_the_new_budget fails;
          checks.py:target_needs_budget returning False always ->
          test_a_rollback_to_a_new_file_engine_is_still_held_to_the_budget fails.
"""

from __future__ import annotations

from fakes import ENV, NEW_R2, OLD_FILE, OLD_R2, R1, RB, TAG, Rig, ctx_at, host_before
from orchestrator.engine.rules.ownership import created_ids, gone_ids, owned_split, ps_ids, record
from orchestrator.engine.steps.checks import target_needs_budget
from orchestrator.hosts.envmap import EnvMap
from orchestrator.hosts.parsers.docker_ps import Container

NEW_FILE = RB.file
BUDGET = RB.budget.variable


def _c(cid: str, svc: str) -> Container:
    return Container(id=cid, name=svc, image="img", state="running", status="Up 2 hours", created_at="t", service=svc)


# -- the pure ledger --------------------------------------------------------------------------------

def test_created_and_gone_ids_are_by_container_id_not_by_name():
    before = ps_ids([_c("aaa", R1), _c("bbb", OLD_R2), _c("ccc", "nginx")])
    after = [_c("ddd", R1), _c("eee", NEW_R2), _c("ccc", "nginx")]  # r1 recreated under the same name
    assert created_ids(before, after, [R1, NEW_R2]) == {"ddd": R1, "eee": NEW_R2}
    assert created_ids(before, after, [NEW_R2]) == {"eee": NEW_R2}  # only what the call named
    assert gone_ids(before, after) == {"aaa": R1, "bbb": OLD_R2}
    assert gone_ids(before, after, [OLD_R2]) == {"bbb": OLD_R2}
    ledger: dict = {}
    assert record(ledger, {"ddd": R1}, "r1.apply") == ["ddd"]
    assert record(ledger, {"ddd": R1}, "r1.apply@later") == []  # the first state that saw it stays
    assert ledger == {"ddd": {"service": R1, "state": "r1.apply"}}
    mine, others = owned_split(after, ledger)
    assert [c.id for c in mine] == ["ddd"] and [c.id for c in others] == ["eee", "ccc"]


# -- the ledger in a run ----------------------------------------------------------------------------

async def test_a_rollout_records_what_it_created_and_stopped_by_container_id():
    rig = Rig()
    host_before(rig.compose)
    old = {s: c.id for s, c in rig.compose.host.items()}
    final = await rig.run_to_end()
    assert final.outcome == "DONE", final.message
    new = {s: c.id for s, c in rig.compose.host.items()}
    ctx = final.context
    assert ctx["created"][new[NEW_R2]] == {"service": NEW_R2, "state": "r2.apply"}
    assert ctx["created"][new[R1]] == {"service": R1, "state": "r1.apply"}
    assert old[R1] not in ctx["created"] and old[OLD_R2] not in ctx["created"]
    assert ctx["stopped"][old[OLD_R2]] == {"service": OLD_R2, "state": "r2.stop-old"}
    assert ctx["stopped"][old[R1]] == {"service": R1, "state": "r1.stop-old"}
    assert ctx["not_stopped"] == []


class Crash(Exception):
    pass


async def test_the_ledger_survives_a_crash_after_the_ups_outcome():
    """Killed after the up's outcome is journaled, before the transition writes the context: the
    resumed step rebuilds the ledger from the intent's docker/ps baseline, and sends nothing again."""
    rig = Rig(state="r2.dry-run", ctx=ctx_at())
    rig.compose.run(R1)
    assert [e for e, _, _ in await rig.step()] == ["ok"]
    real = rig.journal.record_outcome

    def crash_after_up(lease, run_id, effect_id, outcome):
        real(lease, run_id, effect_id, outcome)
        if any(e.effect_id == effect_id and e.kind == "compose_up" for e in rig.journal.effects(run_id)):
            raise Crash()

    rig.journal.record_outcome = crash_after_up  # type: ignore[method-assign]
    try:
        await rig.step()
    except Crash:
        pass
    rig.journal.record_outcome = real  # type: ignore[method-assign]
    assert rig.record().state == "r2.apply" and not rig.record().context.get("created")  # the transition never came
    rig.resume()
    assert [e for e, _, _ in await rig.step()] == ["ok"]
    assert len(rig.compose.sent("up")) == 1
    assert rig.ctx.created == {rig.compose.host[NEW_R2].id: {"service": NEW_R2, "state": "r2.apply"}}


# -- a rollback stops only what its run created -------------------------------------------------

def _at_r1_rollback(created_r1: bool) -> Rig:
    """r1's stop-old was refused, so r1's rollback runs: the new r2 (this run's) serves, and the
    r1 running is the OLD one (same service name) unless `created_r1`."""
    from orchestrator.engine.context import Failure

    rig = Rig(state="r1.rollback.stop-new", ctx=ctx_at(failure=Failure("r1.stop-old", "fail", "compose-manager did not run the down")))
    r2 = rig.compose.run(NEW_R2, file=NEW_FILE, tag=TAG)
    r1 = rig.compose.run(R1, file=NEW_FILE if created_r1 else OLD_FILE, tag=TAG if created_r1 else "v1")
    rig.ctx.created[r2.id] = {"service": NEW_R2, "state": "r2.apply"}
    if created_r1:
        rig.ctx.created[r1.id] = {"service": R1, "state": "r1.apply"}
    rig.ex.rt.save_context()
    return rig


async def test_a_rollback_never_stops_a_namesake_it_did_not_create():
    rig = _at_r1_rollback(created_r1=False)
    old_r1 = rig.compose.host[R1].id
    done = await rig.step()
    assert done[0][0] == "ok" and "not one this run created" in done[0][1], done
    assert rig.compose.sent("down") == []
    assert rig.compose.host[R1].id == old_r1
    assert rig.ctx.not_stopped and old_r1[:12] in rig.ctx.not_stopped[0]
    final = await rig.run_to_end()
    assert final.outcome == "HALTED"
    assert "left running what this run did not create" in final.message and old_r1[:12] in final.message
    assert "The failing r1 was stopped" not in final.message  # the runbook's text tells of a stop never made
    assert f"orchestrate resume {rig.run.run_id} --retry" in final.message


async def test_a_rollback_stops_the_engine_its_run_created():
    rig = _at_r1_rollback(created_r1=True)
    new_r1 = rig.compose.host[R1].id
    assert [e for e, _, _ in await rig.step()] == ["ok"]
    assert [r.services for r in rig.compose.sent("down")] == [(R1,)]
    assert R1 not in rig.compose.host
    assert rig.ctx.stopped[new_r1] == {"service": R1, "state": "r1.rollback.stop-new"}
    assert rig.ctx.not_stopped == []


async def test_a_rollback_stop_refused_for_the_lock_is_told_as_it_is():
    """r1's rollback reaches stop-new and compose-manager's lock stays held: the run halts there
    with the lock's note; the runbook's message (which tells of a stop made) is not said."""
    from orchestrator.hosts.clients.errors import Busy

    rig = _at_r1_rollback(created_r1=True)
    new_r1 = rig.compose.host[R1].id

    def locked(verb, req, env):
        if verb == "down":
            raise Busy("compose-manager", "another docker operation is already in progress: compose_up")
        return None

    async def status():
        return None

    rig.compose.on_send = locked
    rig.compose.status = status
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED"), (event, note, to)
    final = rig.record()
    assert rig.compose.host[R1].id == new_r1
    assert "The failing r1 was stopped" not in final.message, final.message
    assert "then r1.rollback.stop-new halted: compose-manager's lock stayed held" in final.message, final.message


async def test_a_forward_stop_of_the_old_engine_is_not_held_to_ownership():
    """Replacing the previous engine is the rollout's job: only rollbacks are limited to what the
    run created."""
    rig = Rig(state="r2.stop-old", ctx=ctx_at())
    host_before(rig.compose)
    assert [e for e, _, _ in await rig.step()] == ["ok"]
    assert [r.services for r in rig.compose.sent("down")] == [(OLD_R2,)]


def _two_engine_rollback_rb():
    """r1's rollback stop-new naming both engines (as a base host's rollback stops both of its)."""
    ph = RB.phases[1]
    steps = [st.model_copy(update={"down": st.down.model_copy(update={"services": [R1, NEW_R2]})}) if st.id == "stop-new" else st
             for st in ph.rollback.steps]
    r1 = ph.model_copy(update={"rollback": ph.rollback.model_copy(update={"steps": steps})})
    return RB.model_copy(update={"phases": [RB.phases[0], r1, *RB.phases[2:]]})


async def test_a_resumed_narrowed_down_waits_only_for_what_it_sent():
    """A rollback down narrowed to what the run created (the new r2, not the old r1) is killed
    after its outcome: the resume settles that down and waits only for the new r2 to be gone."""
    rig = Rig(state="r1.rollback.stop-new", ctx=ctx_at(), rb=_two_engine_rollback_rb())
    rig.compose.run(R1)  # the old r1, never touched: serves
    r2 = rig.compose.run(NEW_R2, file=NEW_FILE, tag=TAG)
    rig.ctx.created[r2.id] = {"service": NEW_R2, "state": "r2.apply"}
    rig.ex.rt.save_context()
    real = rig.journal.record_outcome

    def crash(lease, run_id, effect_id, outcome):
        real(lease, run_id, effect_id, outcome)
        raise Crash()

    rig.journal.record_outcome = crash  # type: ignore[method-assign]
    try:
        await rig.step()
    except Crash:
        pass
    rig.journal.record_outcome = real  # type: ignore[method-assign]
    assert [r.services for r in rig.compose.sent("down")] == [(NEW_R2,)]
    rig.resume()
    done = await rig.step()
    assert done[0][0] == "ok", done
    assert [r.services for r in rig.compose.sent("down")] == [(NEW_R2,)]  # never sent again
    assert R1 in rig.compose.host
    assert rig.ctx.stopped == {r2.id: {"service": NEW_R2, "state": "r1.rollback.stop-new"}}


# -- a rollback is judged by what its target needs (case 9) -------------------------------------

CHANGED = EnvMap({**dict(ENV.items()), BUDGET: "300GiB"})  # the new engines' rule allows 406GiB only


def test_the_budget_rule_is_about_the_new_files_engines_only():
    assert target_needs_budget(RB, NEW_FILE, [NEW_R2])
    assert target_needs_budget(RB, NEW_FILE, ["model-downloader", R1])
    assert not target_needs_budget(RB, OLD_FILE, [OLD_R2])
    assert not target_needs_budget(RB, OLD_FILE, [R1])  # the previous file's r1: not what the rule describes
    assert not target_needs_budget(RB, NEW_FILE, ["proxy-glm53"])


def _budget_checked(state: str) -> Rig:
    """At `state`, the budget having passed for ENV; the dashboard now serves CHANGED."""
    ctx = ctx_at(budget_env_fingerprint=ENV.fingerprint())
    rig = Rig(state=state, ctx=ctx, env=(CHANGED,))
    rig.compose.run(R1)
    return rig


async def test_a_rollback_to_the_previous_file_is_not_held_to_the_new_budget():
    rig = _budget_checked("r2.rollback.dry-run-old")
    done = await rig.step()
    assert done[0][0] == "ok", done
    assert [r.services for r in rig.compose.sent("dry_run")] == [(OLD_R2,)]
    assert any("not held to the new engines' budget rule" in ev[1].get("text", "") for ev in rig.progress.events if ev[0] == "note")


async def test_a_forward_dry_run_is_still_held_to_the_budget():
    rig = _budget_checked("r2.dry-run")
    done = await rig.step()
    assert done[0][0] == "fail" and "no longer passes the budget check" in done[0][1], done
    assert rig.compose.sent("dry_run") == []


async def test_a_rollback_to_a_new_file_engine_is_still_held_to_the_budget():
    """A rollback whose target is an engine the rule describes (the new file's) is checked."""
    rig = _budget_checked("rollback-r1.dry-run-old")
    rig.ctx.previous[R1] = {"tag": "v1", "file": NEW_FILE, "commit": ""}
    rig.ex.rt.save_context()
    done = await rig.step()
    assert done[0][0] == "fail" and "no longer passes the budget check" in done[0][1], done
    assert rig.compose.sent("dry_run") == []


def test_a_retry_keeps_the_ledger_of_the_run_it_continues():
    """`resume --retry` continues the same rollout: an abort's whole-host rollback in the child must
    still stop the new r2 the parent created (and never what neither created)."""
    from orchestrator.engine.executor import RunContext

    parent = RunContext(created={"abc": {"service": NEW_R2, "state": "r2.apply"}},
                        stopped={"def": {"service": OLD_R2, "state": "r2.stop-old"}}, not_stopped=["a note"])
    child = parent.for_retry()
    assert child.created == parent.created and child.stopped == parent.stopped
    assert child.not_stopped == []  # what the parent's rollback left running is its own message


async def test_a_rollback_leaves_a_sidecar_it_did_not_start_without_blaming_the_message():
    """r2's rollback after a cold-start failure: the soak relay running is the previous file's (the
    run never started its own): it is left running, noted, and the final message names no engine."""
    from fakes import RELAY

    rig = Rig(state="r2.rollback.relay-stop", ctx=ctx_at())
    rig.compose.run(R1)
    relay = rig.compose.run(RELAY)
    done = await rig.step()
    assert done[0][0] == "ok" and relay.id[:12] in done[0][1], done
    assert rig.compose.sent("down") == [] and rig.compose.host[RELAY].id == relay.id
    assert rig.ctx.not_stopped == []


async def test_an_operators_rollback_run_stops_the_rolled_out_engine_it_did_not_create():
    """`orchestrate rollback --replica all` (a run of its own) was asked to stop the engines an
    earlier rollout created: ownership does not hold it back; the stop guard still applies."""
    rig = Rig(state="rollback-r2.stop-new", ctx=ctx_at(), kind="rollback")
    rig.compose.run(R1, file=NEW_FILE, tag=TAG)  # r1 serves on the new file
    rig.compose.run(NEW_R2, file=NEW_FILE, tag=TAG)
    assert [e for e, _, _ in await rig.step()] == ["ok"]
    assert [r.services for r in rig.compose.sent("down")] == [(NEW_R2,)]
    assert rig.ctx.not_stopped == []


def test_the_note_names_what_the_run_did_stop_under_that_name():
    from orchestrator.engine.rules.ownership import not_ours_note

    c = _c("0123456789abcdef", R1)
    assert not_ours_note(c, "r1.rollback.stop-new", {}) == (
        f"r1.rollback.stop-new did not stop {R1}: container 0123456789ab (Up 2 hours) is not one this run created, "
        "so it was left running")
    assert not_ours_note(c, "s", {"fedcba9876543210": {"service": R1, "state": "r1.stop-old"},
                                  "aaaaaaaaaaaa": {"service": OLD_R2, "state": "r2.stop-old"}}).endswith(
        "(this run stopped fedcba987654 under that name)")
