"""`orchestrate plan` for the gpu02 runbook, byte for byte against golden files.

The plan is what an operator reviews before a rollout and what CI posts: any change to it must be
deliberate. Regenerate after an intended change with `ORCHESTRATOR_UPDATE_GOLDEN=1 pytest tests/core/test_plan_golden.py`
and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.language.machine import compile_rollback, compile_rollout
from orchestrator.language.runbook import load_runbook
from orchestrator.previews.plan import build_plan, render_json, render_markdown, render_text

GOLDEN = Path(__file__).resolve().parent / "golden"
RENDER = {"text": render_text, "markdown": render_markdown, "json": render_json}


def _check(name: str, produced: str) -> None:
    path = GOLDEN / name
    if os.environ.get("ORCHESTRATOR_UPDATE_GOLDEN") == "1":
        path.write_text(produced)
    assert produced == path.read_text(), f"{name} changed: review it, then regenerate (see the module docstring)"


@pytest.mark.parametrize("fmt", sorted(RENDER))
def test_rollout_plan_is_byte_identical(fmt):
    rb = load_runbook()
    plan = build_plan(rb, compile_rollout(rb), host="gpu02", tag="v0.0.300")
    out = RENDER[fmt](plan)
    _check(f"plan-gpu02.{fmt}.txt", out if out.endswith("\n") else out + "\n")


def test_whole_host_rollback_plan_is_byte_identical():
    rb = load_runbook()
    plan = build_plan(rb, compile_rollback(rb, rb.rollback_replicas("all")), host="gpu02", tag="v0.0.300")
    _check("plan-gpu02-rollback-all.text.txt", render_text(plan))


def test_a_runbook_change_changes_the_plan():
    rb = load_runbook()
    changed = rb.model_copy(update={"title": rb.title + " (edited)"})
    plan = build_plan(changed, compile_rollout(changed), host="gpu02", tag="v0.0.300")
    assert render_text(plan) != (GOLDEN / "plan-gpu02.text.txt").read_text()


def test_base_tier_fleet_plan_is_byte_identical():
    """The base tier's fleet plan: the host order and its rules, then one host's steps."""
    from orchestrator.previews.plan import fleet_rules

    rb = load_runbook("base-glm53-w4afp8")
    hosts = ["gpu03", "gpu04", "gpu23"]
    plan = build_plan(rb, compile_rollout(rb), host=hosts[0], tag="v0.0.310")
    plan.fleet, plan.fleet_rules = hosts, fleet_rules(rb, hosts)
    _check("plan-base-fleet.text.txt", render_text(plan))


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_base_tier_plan_with_its_remedies_is_byte_identical(fmt):
    """The base tier's cold-start gates each name a remedy on DistStoreError: the plan shows the
    remedy edge and cap on the gate, the remedy's steps right after it, and the way back to it."""
    rb = load_runbook("base-glm53-w4afp8")
    plan = build_plan(rb, compile_rollout(rb), host="gpu03", tag="v0.0.300")
    out = RENDER[fmt](plan)
    _check(f"plan-base.{fmt}.txt", out if out.endswith("\n") else out + "\n")
