"""`plan` marks a rollback up that would remove a running service as an orphan (issue: the naive
"restore r1 from the previous file" while the new r2 runs)."""

import copy

import yaml

from orchestrator.language.machine import compile_rollout
from orchestrator.language.runbook import RUNBOOK_DIR, load_runbook, parse_runbook
from orchestrator.previews.plan import build_plan, render_text

RAW = yaml.safe_load((RUNBOOK_DIR / "gpu02-glm53-w4afp8-long-context.yaml").read_text())


def test_shipped_runbook_has_no_unsafe_up():
    rb = load_runbook()
    plan = build_plan(rb, compile_rollout(rb), host="gpu02", tag="v0.0.300")
    assert [s.state for s in plan.steps if s.unsafe] == []


def test_naive_r1_rollback_to_the_previous_file_is_marked_unsafe():
    data = copy.deepcopy(RAW)
    r1 = next(p for p in data["phases"] if p["name"] == "r1")
    prev = "previous:model-sg-glm53-w4afp8-tp4-r1"
    r1["rollback"]["steps"] += [
        {"id": "dry-run-old", "say": "naive", "dry_run": {"file": prev, "services": ["model-sg-glm53-w4afp8-tp4-r1"]},
         "plan": {"change": ["model-sg-glm53-w4afp8-tp4-r1"]}},
        {"id": "up-old", "say": "naive", "up": {"file": prev, "services": ["model-sg-glm53-w4afp8-tp4-r1"]}},
    ]
    rb = parse_runbook(data)
    plan = build_plan(rb, compile_rollout(rb), host="gpu02", tag="v0.0.300")
    unsafe = {s.state: s.orphans for s in plan.steps if s.unsafe}
    assert unsafe == {"r1.rollback.up-old": ["model-sg-glm53-w4afp8-tp4-r2"]}
    assert "UNSAFE" in render_text(plan)
