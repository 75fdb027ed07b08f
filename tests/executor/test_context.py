"""The run's typed context round-trips through the journal's JSON, keeping what it does not know."""

from __future__ import annotations

import pytest

from orchestrator.engine.executor.context import DryRunRecord, Failure, RunContext, same_request


def test_round_trip_keeps_every_field_and_unknown_keys():
    ctx = RunContext.new(previous={"a": {"tag": "v1", "file": "f", "commit": ""}}, start_phase="r1",
                         checked_dry_run=DryRunRecord("v2", "f", ["s"], None, "fp", after={"c": ["id", "t", "running"]}),
                         failure=Failure("r2.apply", "fail", "why"))
    data = ctx.to_json() | {"runbook_identity": {"name": "x", "sha256": "00"}}
    back = RunContext.from_json(data)
    assert back.to_json() == data  # the server's pinned runbook survives every transition
    assert back.checked_dry_run == ctx.checked_dry_run and back.failure == ctx.failure


def test_same_request_includes_the_env_fingerprint():
    dry = DryRunRecord("v2", "f", ["s"], None, "fp-a")
    assert same_request(dry, tag="v2", file="f", services=("s",), project=None, env_fingerprint="fp-a")
    assert not same_request(dry, tag="v2", file="f", services=("s",), project=None, env_fingerprint="fp-b")
    assert not same_request(None, tag="v2", file="f", services=("s",), project=None, env_fingerprint="fp-a")


def _reference(ctx: RunContext) -> dict:
    """What to_json returned before its fast path: dataclasses.asdict's deep walk."""
    return ctx._to_json_walk()


def test_to_json_fast_path_equals_the_walk_and_is_a_deep_copy():
    ctx = RunContext.new(previous={"a": {"tag": "v1", "file": "f", "commit": ""}}, plans={"r1.dry-run": {"actions": {"s": "recreate"}, "verdict": "ok"}},
                         checked_dry_run=DryRunRecord("v2", "f", ["s"], None, "fp", after={"c": ["id", "t", "running"]}),
                         failure=Failure("r2.apply", "fail", "why"), soaks={"r1.soak": 12.5}, extra={"runbook_identity": {"name": "x"}})
    data = ctx.to_json()
    assert data == _reference(ctx)
    data["previous"]["a"]["tag"] = "changed"  # the copy is deep: the context is untouched
    data["checked_dry_run"]["after"]["c"].append("x")
    assert ctx.previous["a"]["tag"] == "v1" and ctx.checked_dry_run.after["c"] == ["id", "t", "running"]


@pytest.mark.parametrize("placement", [{"seen": ("a", "b")}, {3: "three"}, {"x": float("nan")}])
def test_to_json_keeps_what_json_would_change(placement):
    """A tuple, an int key, a NaN: the JSON round trip would change them, so the walk answers."""
    ctx = RunContext.new(placement=placement)
    data = ctx.to_json()
    assert list(data["placement"]) == list(placement)
    got, want = next(iter(data["placement"].values())), next(iter(placement.values()))
    assert type(got) is type(want) and (got == want or got != got)


def test_to_json_takes_the_walk_for_what_json_cannot_write():
    ctx = RunContext.new(extra={"odd": {1, 2}})
    assert ctx.to_json()["odd"] == {1, 2}
