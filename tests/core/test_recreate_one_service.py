"""Recreate one service on a host that stays registered (issue 23, item 7): already expressible as
a scoped `dry_run` + `up` with `force_recreate` of that one service and no drain, between two
`presence:` gates that the host is still listed. Its plan, byte for byte, and the guards that keep
it scoped (an engine is never force-recreated; the up needs its own dry run)."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import pytest
import yaml

from orchestrator.language.machine import compile_rollout
from orchestrator.language.runbook import RUNBOOK_DIR, parse_runbook
from orchestrator.previews.plan import build_plan, render_text
from orchestrator.util.user_errors import UserError

GOLDEN = Path(__file__).resolve().parent / "golden" / "plan-gpu02-recreate-collector.text.txt"
RAW = yaml.safe_load((RUNBOOK_DIR / "gpu02-glm53-w4afp8-long-context.yaml").read_text())
PHASE = {"name": "collector", "title": "Recreate otelcol-contrib alone; gpu02 stays registered", "steps": [
    {"id": "still-listed", "say": "gpu02 serves the long domain before", "presence": {"listed": ["long"], "within": "1m"}},
    {"id": "collector-dry-run", "say": "Dry-run a forced recreate of otelcol-contrib alone",
     "dry_run": {"file": "new", "services": ["otelcol-contrib"], "force_recreate": True},
     "plan": {"change": ["otelcol-contrib"]}},
    {"id": "collector-up", "say": "Recreate otelcol-contrib",
     "up": {"file": "new", "services": ["otelcol-contrib"], "force_recreate": True}},
    {"id": "listed-after", "say": "gpu02 still serves the long domain", "presence": {"listed": ["long"], "within": "1m"}},
]}


def recreate(service: str = "otelcol-contrib", *, drop_dry_run: bool = False) -> dict:
    raw = copy.deepcopy(RAW)
    raw["name"] = "gpu02-recreate-collector"
    raw["preflight"] = [s for s in raw["preflight"] if s["id"] in ("read-env", "before-state")]
    phase = yaml.safe_load(yaml.safe_dump(PHASE).replace("otelcol-contrib", service))
    if drop_dry_run:
        phase["steps"] = [s for s in phase["steps"] if "dry_run" not in s]
    raw["phases"], raw["full_rollback"], raw["host_states"] = [phase], [], []
    raw.pop("rollback_keeps", None)
    return raw


def _plan() -> str:
    rb = parse_runbook(recreate())
    return render_text(build_plan(rb, compile_rollout(rb), host="gpu02", tag="v0.0.300"))


def test_the_plan_recreates_that_one_service_and_nothing_else_between_two_presence_gates():
    text = _plan()
    calls = re.findall(r"call: POST /compose/(\w+) (\{.*\})", text)
    assert [c[0] for c in calls] == ["up", "up"]  # the dry run and the up; no down, no drain
    assert all('"services": ["otelcol-contrib"]' in body and '"force_recreate": true' in body for _, body in calls)
    assert ['"dry_run": true' in body for _, body in calls] == [True, False]
    assert text.count("the host listed healthy under glm-5-3-flash-long.completions.near.ai") == 2
    assert "unregist" not in text and "drain" not in text


def test_the_plan_is_byte_identical():
    text = _plan() + "\n"
    if os.environ.get("ORCHESTRATOR_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "the plan changed: review it, then regenerate (tests/core/test_plan_golden.py)"


def test_an_engine_is_never_force_recreated_this_way():
    with pytest.raises(UserError, match="force_recreate") as e:
        parse_runbook(recreate("model-sg-glm53-w4afp8-tp4-r2"))
    assert "\n" not in str(e.value)


def test_the_recreate_needs_its_own_dry_run():
    with pytest.raises(UserError, match="preceded by a dry_run of the same request") as e:
        parse_runbook(recreate(drop_dry_run=True))
    assert "\n" not in str(e.value)
