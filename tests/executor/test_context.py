"""The run's typed context round-trips through the journal's JSON, keeping what it does not know.

Rules (orchestrator/engine/context.py): one serialisation path (`to_json`, a deep copy); the JSON is
the shape every runner wrote, so a context journaled by an older runner is read back typed
(`BeforeState`, `Placement`, `ActionMark`) and written back unchanged, and its run resumes.
Mutations: `from_json` leaving `action_mark` a dict (or dropping it) -> the resume test's foreign
change goes unseen (the down is sent); `to_json` writing an unset part as null -> the round trip fails.
"""

from __future__ import annotations

from test_foreign_and_scoped_dry_runs import PERSON, person_recreates_nginx

from fakes import OLD_FILE, OLD_R2, PREVIOUS, R1, Rig, ctx_at, host_before
from orchestrator.engine.context import (
    ActionMark,
    BeforeState,
    DryRunRecord,
    Failure,
    Placement,
    RunContext,
)
from orchestrator.engine.rules.foreign_change import new_mark

#: A context as the runner before the typed parts journaled it (every key it wrote, and the server's).
OLD = {
    "previous": {k: dict(v) for k, v in PREVIOUS.items()},
    "previous_source": "the action log, checked against compose-manager's success record and the journal",
    "plans": {"r1.dry-run": {"actions": {R1: "recreated"}, "verdict": "apply"}},
    "retries": {"r1.apply": 1}, "remedies": {}, "selected": None, "checked_dry_run": None,
    "deployed": {R1: {"tag": "v2", "file": "new.yaml"}}, "budget": {"replica_bytes": 1, "rank_budget_bytes": 2},
    "before": {"version": {"tag": "v1", "commit": "abc", "file": OLD_FILE},
               "ps": {R1: {"id": "c1", "state": "running", "status": "Up 2 hours"}},
               "peers": {"peer-a/long": {"listed": True, "healthy": True}}, "completion": {"ok": True, "prompt_tokens": 12}},
    "env_keys_fingerprint": "fp", "env_keys": 7, "budget_env_fingerprint": "fp2", "failure": None, "replicas": [],
    "start_phase": None,
    "placement": {"observed": {R1: "previous", OLD_R2: "previous"}, "state": "before", "serving": {R1: "serving"}},
    "soaks": {"r1.soak": 60.0}, "soak_watch": {"r1.soak": {R1: "c1"}}, "yes": True, "skip_tag_age_check": False,
    "oneshots_removed": [], "ready": {R1: "c1"},
    "milestones": {R1: {"container": "c1", "per_rank": {"rank_budget_bytes=": [0, 1]}, "once": [], "start": "ab", "last": "cd"}},
    "created": {"c1": {"service": R1, "state": "r1.apply"}}, "stopped": {}, "not_stopped": [],
    "action_mark": {"count": 1, "last": [None, "compose_up", "v1", OLD_FILE, []], "effect_id": 3},
    "runbook_identity": {"name": "x", "sha256": "00"},
}


def test_a_context_journaled_by_the_older_runner_is_read_typed_and_written_back_unchanged():
    ctx = RunContext.from_json(OLD)
    assert ctx.before == BeforeState(version=OLD["before"]["version"], ps=OLD["before"]["ps"],
                                     peers=OLD["before"]["peers"], completion=OLD["before"]["completion"])
    assert ctx.placement == Placement(observed=OLD["placement"]["observed"], state="before", serving={R1: "serving"})
    assert ctx.action_mark == ActionMark(count=1, last=[None, "compose_up", "v1", OLD_FILE, []], effect_id=3)
    assert ctx.plans["r1.dry-run"]["actions"] == {R1: "recreated"} and ctx.milestones[R1]["container"] == "c1"
    assert ctx.extra == {"runbook_identity": {"name": "x", "sha256": "00"}}
    assert ctx.to_json() == OLD


def test_unset_parts_are_written_as_they_always_were():
    data = RunContext().to_json()
    assert (data["before"], data["placement"], data["action_mark"]) == ({}, {}, {})
    back = RunContext.from_json(data)
    assert (back.before, back.placement, back.action_mark) == (None, None, None)
    # a mark from before it carried the journal's effect id; a placement that never judged serving
    old = RunContext.from_json({"action_mark": {"count": 2, "last": None}, "placement": {"observed": {}, "state": None}})
    assert old.action_mark == ActionMark(2, None, 0)
    assert old.placement is not None and old.placement.serving is None
    assert "serving" not in old.to_json()["placement"]


def test_round_trip_keeps_every_field_and_unknown_keys():
    ctx = RunContext(previous={"a": {"tag": "v1", "file": "f", "commit": ""}}, start_phase="r1",
                     checked_dry_run=DryRunRecord("v2", "f", ["s"], None, "fp", after={"c": ["id", "t", "running"]}),
                     failure=Failure("r2.apply", "fail", "why"))
    data = ctx.to_json() | {"runbook_identity": {"name": "x", "sha256": "00"}}
    back = RunContext.from_json(data)
    assert back.to_json() == data  # the server's pinned runbook survives every transition
    assert back.checked_dry_run == ctx.checked_dry_run and back.failure == ctx.failure


def test_to_json_is_a_deep_copy():
    ctx = RunContext.from_json(OLD)
    data = ctx.to_json()
    data["previous"][R1]["tag"] = "changed"
    data["placement"]["observed"][R1] = "changed"
    data["action_mark"]["last"].append("x")
    assert ctx.previous[R1]["tag"] == "v1" and ctx.placement.observed[R1] == "previous"
    assert ctx.action_mark.last == [None, "compose_up", "v1", OLD_FILE, []]


def test_the_same_request_includes_the_env_fingerprint():
    dry = DryRunRecord("v2", "f", ["s"], None, "fp-a", after={"s": ["id", "created", "running"]})
    assert dry == DryRunRecord("v2", "f", ["s"], None, "fp-a")  # docker/ps after it is not the request
    assert dry != DryRunRecord("v2", "f", ["s"], None, "fp-b")
    assert dry != DryRunRecord("v2", "f", ["s"], None, "fp-a", force_recreate=True)


async def test_a_run_journaled_by_the_older_runner_resumes_with_its_action_mark():
    """The resumed runner reads the old mark and so sees a call someone else made since: it halts
    before its down instead of sending it."""
    rig = Rig(state="r2.stop-old", ctx=ctx_at())
    host_before(rig.compose)
    old = rig.ctx.to_json() | {"action_mark": new_mark(list(rig.compose.actions), 0)}  # the dict the old runner wrote
    rig.journal.update_context(rig.lease, rig.run.run_id, old)
    rig.resume()
    assert isinstance(rig.ctx.action_mark, ActionMark)
    person_recreates_nginx(rig)
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED") and "foreign change" in note and PERSON in note, note
    assert rig.compose.sent("down") == []
