"""The run's typed context round-trips through the journal's JSON, keeping what it does not know."""

from __future__ import annotations

from orchestrator.executor.context import DryRunRecord, Failure, RunContext, same_request


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
