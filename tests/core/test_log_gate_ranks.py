"""Ranks per engine and what `plan` says a cold-start gate fails on.

- a TP4 budget and a TP2 budget in one runbook: each engine's gate counts its own budget's ranks
  (TP0-TP3, TP0-TP1), and `plan` says so;
- `logs.ranks` sets an engine's ranks (a gate without a budget), and a budget gate's ranks are its
  budget's (another number is refused);
- a budget gate whose milestones do not include rank_budget_bytes fails only on a wrong value:
  `plan` says that, never "every rank ... logs rank_budget_bytes".

Mutation list (each guard disabled in the source, the named test seen failing, the source restored):
- Runbook.ranks_of's budget branch -> test_a_tp4_and_a_tp2_budget_each_count_their_own_ranks;
- runbook_model's logs.ranks/ranks_per_replica check -> test_a_budget_gates_ranks_are_its_budgets;
- step_descriptions._cold_start's `budget_required` -> test_plan_says_a_gate_without_a_budget_milestone_fails_only_on_a_wrong_value.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from orchestrator.engine.step_descriptions import describe_step
from orchestrator.language.runbook import RUNBOOK_DIR, parse_runbook
from orchestrator.util.user_errors import UserError

RAW = yaml.safe_load((RUNBOOK_DIR / "gpu02-glm53-w4afp8-long-context.yaml").read_text())
R1, R2 = "model-sg-glm53-w4afp8-tp4-r1", "model-sg-glm53-w4afp8-tp4-r2"


def tp4_and_tp2(**log_gates) -> dict:
    """r1's engine a TP4 budget, r2's a TP2 one (the same host RAM, split over 2 ranks)."""
    raw = copy.deepcopy(RAW)
    one = raw["budget"]
    raw["budget"] = [
        {**one, "variable": "R1_BUDGET", "default": "406GiB", "allowed": ["406GiB"], "replicas": 1, "engines": [R1]},
        {**one, "variable": "R2_BUDGET", "default": "200GiB", "allowed": ["200GiB"], "replicas": 1, "engines": [R2],
         "ranks_per_replica": 2},
    ]
    raw["log_gates"].update(log_gates)
    return raw


def _gate(rb, phase: str, service: str) -> str:
    st = next(s for s in rb.phase(phase).steps if s.logs is not None and s.logs.service == service)
    return describe_step(st, rb).gate


def test_a_tp4_and_a_tp2_budget_each_count_their_own_ranks():
    rb = parse_runbook(tp4_and_tp2())
    r1 = next(s for s in rb.phase("r1").steps if s.logs is not None and s.logs.service == R1)
    r2 = next(s for s in rb.phase("r2").steps if s.logs is not None and s.logs.service == R2)
    assert rb.ranks_of(r1.logs) == 4 and rb.ranks_of(r2.logs) == 2
    assert "every rank TP0-TP1 logs rank_budget_bytes=107374182400 and 'HiCache startup RAM allocated'" in _gate(rb, "r2", R2)
    assert "every rank TP0-TP3 logs rank_budget_bytes=108984795136" in _gate(rb, "r1", R1)


def test_logs_ranks_sets_an_engines_ranks():
    raw = copy.deepcopy(RAW)
    st = next(s for s in raw["phases"][0]["steps"] if "logs" in s)
    st["logs"]["ranks"] = 4
    rb = parse_runbook(raw)
    assert rb.ranks_of(next(s for s in rb.phase("r2").steps if s.logs is not None).logs) == 4
    rb = parse_runbook(copy.deepcopy(RAW))
    rb2 = rb.model_copy(update={"log_gates": rb.log_gates.model_copy(update={"ranks": 2})})
    no_budget = next(s for s in rb2.phase("r2").rollback.steps if s.logs is not None and not s.logs.budget)
    assert rb2.ranks_of(no_budget.logs) == 2


def test_a_budget_gates_ranks_are_its_budgets():
    raw = tp4_and_tp2()
    st = next(s for ph in raw["phases"] if ph["name"] == "r2" for s in ph["steps"] if "logs" in s)
    st["logs"]["ranks"] = 4
    with pytest.raises(UserError, match=r"logs.ranks: 4 ranks, but the budget of .* \(R2_BUDGET\) splits over "
                                        r"ranks_per_replica: 2") as e:
        parse_runbook(raw)
    assert "\n" not in str(e.value)


def test_plan_says_a_gate_without_a_budget_milestone_fails_only_on_a_wrong_value():
    rb = parse_runbook(tp4_and_tp2(required_per_rank=["HiCache startup RAM allocated"]))
    gate = _gate(rb, "r2", R2)
    assert "every rank TP0-TP1 logs 'HiCache startup RAM allocated', then the ready line" in gate
    assert "a rank logging rank_budget_bytes other than 107374182400 fails it (no rank is required to log it)" in gate
    rb = parse_runbook(tp4_and_tp2(required_per_rank=[]))
    gate = _gate(rb, "r2", R2)
    assert "every rank" not in gate and gate.startswith("the ready line, within 50m; a rank logging rank_budget_bytes other")
