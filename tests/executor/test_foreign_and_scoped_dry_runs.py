"""Foreign-change detection and scoped dry runs in the executor (issue 21, cases 12 and 13).

Mutation list (each guard deleted in the source, the test seen failing, the source restored):
- runtime.py ComposeCalls.mutate: `if foreign: raise ForeignChange(foreign)` removed ->
  test_a_call_someone_else_made_halts_before_the_next_mutating_call (the down is sent).
- runtime.py ComposeCalls.dry_run: the `if foreign:` branch removed ->
  test_a_dry_run_change_beside_a_foreign_entry_names_it_and_does_not_blame_compose (14029 blamed).
- runtime.py Preflight.validate_previous_targets: `engines=set(self.rb.engines())` dropped ->
  test_the_before_state_target_check_never_names_a_running_engine.
- placement.py: the shared-only dry run replaced by 77b15ae's (every running new-file service) ->
  test_placement_names_no_engine_in_any_state.
"""

from __future__ import annotations

import pytest

from fakes import NEW_R2, OLD_R2, OLD_TAG, R1, RB, SHARED, SIDECARS, TAG, Rig, ctx_at, host_before
from orchestrator.engine.context import ActionMark
from orchestrator.engine.rules.foreign_change import new_mark
from orchestrator.hosts.clients.compose_manager import StreamOutcome
from orchestrator.hosts.parsers.action_log import Action

PERSON = "2026-12-01T03:04:05.000000001+00:00"


def person_recreates_nginx(rig: Rig) -> Action:
    a = Action(PERSON, "compose_up", TAG, None, RB.file, None, ("nginx",))
    rig.compose.actions.append(a)
    return a


def at_stop_old() -> Rig:
    rig = Rig(state="r2.stop-old", ctx=ctx_at())
    host_before(rig.compose)
    rig.ctx.action_mark = ActionMark(**new_mark(list(rig.compose.actions), 0))
    return rig


async def test_a_call_someone_else_made_halts_before_the_next_mutating_call():
    rig = at_stop_old()
    person_recreates_nginx(rig)
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED")
    assert "foreign change" in note and "compose_up of nginx" in note and PERSON in note
    assert "14029" not in note
    assert rig.compose.sent("down") == [] and rig.compose.sent("up") == []
    assert OLD_R2 in rig.compose.host  # nothing stopped, nothing rolled back


async def test_the_runs_own_calls_are_not_foreign_even_with_an_unknown_outcome():
    rig = at_stop_old()

    def cut_after_accept(verb, req, env):
        if verb == "down":  # accepted (logged), done, then the stream broke
            for s in req.services:
                rig.compose.host.pop(s, None)
            rig.compose.actions.append(Action("t", "compose_down", req.tag, None, req.file, None, tuple(req.services)))
            return StreamOutcome("unknown", None, [], error="stream broke")
        return None

    rig.compose.on_send = cut_after_accept
    steps = await rig.step(3)  # stop-old, dry-run, apply
    assert [(e, t) for e, _, t in steps] == [("ok", "r2.dry-run"), ("ok", "r2.apply"), ("ok", "r2.cold-start")], steps
    assert [r.services for r in rig.compose.sent("up")] == [(NEW_R2,)]


async def test_a_dry_run_change_beside_a_foreign_entry_names_it_and_does_not_blame_compose():
    rig = Rig(state="r2.dry-run", ctx=ctx_at())
    rig.compose.run(R1)
    rig.ctx.action_mark = ActionMark(**new_mark(list(rig.compose.actions), 0))

    def someone_else(verb, req, env):
        if verb == "dry_run":
            person_recreates_nginx(rig)
            rig.compose.run("nginx")
        return None

    rig.compose.on_send = someone_else
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED")
    assert "foreign change" in note and "compose_up of nginx" in note and PERSON in note
    assert "14029" not in note
    assert rig.compose.sent("up") == []


async def test_a_dry_run_change_without_a_foreign_entry_names_the_container_and_14029():
    rig = Rig(state="r2.dry-run", ctx=ctx_at())
    first = rig.compose.run(R1).id
    rig.ctx.action_mark = ActionMark(**new_mark(list(rig.compose.actions), 0))

    def recreates_r1(verb, req, env):
        if verb == "dry_run":
            rig.compose.run(R1)  # docker/compose#14029
        return None

    rig.compose.on_send = recreates_r1
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED")
    assert f"{R1} recreated ({first}" in note and "14029" in note


async def test_the_before_state_target_check_never_names_a_running_engine():
    rig = Rig(state="preflight.before-state", ctx=ctx_at())
    host_before(rig.compose)
    await rig.step()
    named = {s for r in rig.compose.sent("dry_run") for s in r.services}
    assert named and not named & {R1, OLD_R2}, named
    assert rig.ctx.action_mark is not None and rig.ctx.action_mark.count == len(rig.compose.actions)


def _put(rig: Rig, svc: str, what: str | None) -> None:
    if what == "old":
        rig.compose.run(svc)
    elif what == "new":
        rig.compose.run(svc, file=RB.file, tag=TAG)


@pytest.mark.parametrize("old_r2, new_r2, r1, shared", [
    ("old", None, "old", "old"),      # before
    (None, "new", "old", "old"),      # r2-moved
    (None, "new", "new", "old"),      # replicas moved, shared services on the old file
    (None, "new", "new", "new"),      # at target
])
async def test_placement_names_no_engine_in_any_state(old_r2, new_r2, r1, shared):
    rig = Rig(state="preflight.host-state", ctx=ctx_at())
    _put(rig, OLD_R2, old_r2)
    _put(rig, NEW_R2, new_r2)
    _put(rig, R1, r1)
    for s in (*SIDECARS, *SHARED):
        _put(rig, s, shared)
    await rig.step()
    named = {s for r in rig.compose.sent("dry_run") for s in r.services}
    assert not named & set(RB.engines()), named
    if old_r2 == "old":
        assert rig.compose.sent("dry_run") == []  # an orphan of the new file runs: no dry run at all


async def test_placement_refuses_while_someone_else_s_operation_is_in_flight():
    """Mutation: HostStateCheck's `foreign_in_flight` call removed -> the run goes on (ok)."""
    from orchestrator.hosts.parsers.compose_manager_reads import InFlight

    rig = Rig(state="preflight.host-state", ctx=ctx_at())
    host_before(rig.compose)

    async def status():
        return InFlight("compose_down", PERSON, OLD_TAG, "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-Canary.yaml", (OLD_R2,))

    rig.compose.status = status  # type: ignore[attr-defined]
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("fail", "ABORTED")
    assert f"compose_down of {OLD_R2}" in note and PERSON in note and "no run of this journal" in note


async def test_a_compose_manager_without_status_does_not_stop_placement():
    from orchestrator.hosts.clients.errors import BadRequest

    rig = Rig(state="preflight.host-state", ctx=ctx_at())
    host_before(rig.compose)

    async def status():
        raise BadRequest("compose-manager", "404 Not Found", status=404)

    rig.compose.status = status  # type: ignore[attr-defined]
    [(event, note, to)] = await rig.step()
    assert event == "ok", note
