"""`plan --live`'s pure parts: the read-only guard, the budget rule, the phase dry runs, the
placeholders, and the markdown a CI job summary shows."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.hosts.clients.compose_manager import ComposeRequest
from orchestrator.hosts.envmap import EnvMap
from orchestrator.language.machine import compile_rollout
from orchestrator.language.runbook import load_runbook
from orchestrator.previews.live_plan import (
    LivePlan,
    MutationRefused,
    _ReadOnlyCompose,
    budget_rule,
    phase_dry_run_steps,
)
from orchestrator.previews.plan import build_plan, render_markdown

RB = load_runbook()


class _Spy:
    def __init__(self) -> None:
        self.sent: list[ComposeRequest] = []

    async def up(self, req, env):
        self.sent.append(req)
        return "outcome"


def test_read_only_client_refuses_an_up_without_dry_run_and_has_no_down():
    spy = _Spy()
    cm = _ReadOnlyCompose(spy)  # type: ignore[arg-type]
    env = EnvMap({"A": "b"})
    req = ComposeRequest(tag="v0.0.300", file=RB.file, services=("x",))
    with pytest.raises(MutationRefused):
        asyncio.run(cm.up(req, env))
    assert asyncio.run(cm.up(req.as_dry_run(), env)) == "outcome"
    assert [r.dry_run for r in spy.sent] == [True]
    assert not hasattr(cm, "down")


@pytest.mark.parametrize("raw, good, needle", [
    (None, True, "unset, the file's default: 2 x 406.0 GiB fits"),
    ("406GiB", True, "set in the env map to an allowed value"),
    ("650GiB", False, "a value other than 406GiB"),
    ("nonsense", False, "a value other than 406GiB"),
])
def test_budget_rule_as_the_preflight_states_it(raw, good, needle):
    ok, text = budget_rule(RB, raw, 1223, "test", "gpu02")
    assert ok is good and needle in text
    assert raw is None or raw == "406GiB" or raw not in text  # the value is never echoed


def test_budget_rule_refuses_a_host_too_small():
    ok, text = budget_rule(RB, None, 800, "the inventory", "gpu02")
    assert not ok and "does not fit gpu02's 800.0 GiB" in text


def test_phase_dry_runs_know_what_the_phase_stopped_before_them():
    steps = phase_dry_run_steps(RB, "r2")
    assert [s.id for s, _ in steps] == ["dry-run", "relay-dry-run", "sidecars-dry-run", "collector-dry-run", "perception-dry-run"]
    assert steps[0][1] == {"model-sg-glm53-fp8-tp4-r2"}
    assert [s.id for s, _ in phase_dry_run_steps(RB, "reconcile")] == ["dry-run-all"]  # `selected` depends on it


def test_placeholders_filled_with_previous_and_key_count():
    prev = {s: {"tag": "v0.0.290", "file": "prod/Old.yaml"} for s in RB.previous_refs()}
    plan = build_plan(RB, compile_rollout(RB), host="gpu02", tag="v0.0.300", previous=prev, env_keys=15)
    bodies = [p.request["body"] for p in plan.steps if p.request]
    assert all(b["env"] == "<env map of gpu02: 15 keys>" for b in bodies)
    assert not [b for b in bodies if "<previous" in b["tag"] or "<previous" in b["file"]]
    assert any(b["file"] == "prod/Old.yaml" and b["tag"] == "v0.0.290" for b in bodies)


def test_markdown_collapses_every_phase_and_keeps_the_check_open():
    plan = build_plan(RB, compile_rollout(RB), host="gpu02", tag="v0.0.300")
    plan.problems = ["the file does not define x"]
    md = render_markdown(plan)
    for phase in ("r2", "r1", "reconcile"):
        assert f"<summary>Procedure: phase {phase} (" in md
    assert md.count("<details>") == md.count("</details>") >= 8
    assert md.index("**mismatch**: the file does not define x") < md.index("<details>")
    n_pre = len(load_runbook().preflight)
    assert f"<summary>Preflight (changes nothing) ({n_pre} steps)</summary>\n\n- [ ]" in md  # blank line: GitHub renders the list


def test_verdict_line_and_exit_code():
    plan = build_plan(RB, compile_rollout(RB), host="gpu02", tag="v0.0.300")
    lp = LivePlan(plan=plan, state="before", state_say="the previous configuration")
    assert lp.exit_code == 0 and lp.verdict_line == "verdict: would start: gpu02 is in state before (the previous configuration)"
    lp.refuse("because")
    assert lp.exit_code == 5 and lp.verdict_line == "verdict: would refuse: because"
