"""Several HiCache budgets in one runbook (issue 23): `budget:` as a list, one per replica or
service. Load-time refusals (one line), plan's rendering, and the budget gate fitting them all
together; a single `budget:` mapping keeps working as before."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.engine.step_descriptions import describe_step
from orchestrator.engine.steps.checks import evaluate_budget
from orchestrator.language.runbook import RUNBOOK_DIR, parse_runbook
from orchestrator.util.user_errors import UserError

RAW = yaml.safe_load((RUNBOOK_DIR / "gpu02-glm53-w4afp8-long-context.yaml").read_text())
R1, R2 = "model-sg-glm53-w4afp8-tp4-r1", "model-sg-glm53-w4afp8-tp4-r2"


def two_budgets(r1: str = "406GiB", r2: str = "300GiB", **over) -> dict:
    raw = copy.deepcopy(RAW)
    one = raw["budget"]
    raw["budget"] = [
        {**one, "variable": "R1_BUDGET", "default": r1, "allowed": [r1], "replicas": 1, "engines": [R1]},
        {**one, "variable": "R2_BUDGET", "default": r2, "allowed": [r2, "200GiB"], "replicas": 1, "engines": [R2], **over},
    ]
    return raw


def test_a_single_budget_mapping_still_loads_as_one_budget():
    rb = parse_runbook(copy.deepcopy(RAW))
    assert rb.budget is not None and rb.more_budgets == [] and rb.budgets() == [rb.budget]


def test_a_budget_list_loads_and_each_engine_reads_its_own():
    rb = parse_runbook(two_budgets())
    assert [b.variable for b in rb.budgets()] == ["R1_BUDGET", "R2_BUDGET"]
    assert rb.budget_of(R2).variable == "R2_BUDGET" and rb.budget_of(R1).variable == "R1_BUDGET"


@pytest.mark.parametrize("mutate, why", [
    (lambda raw: raw["budget"][1].update(variable="R1_BUDGET"), "variable R1_BUDGET is also budget[1]'s"),
    (lambda raw: raw["budget"][1].update(engines=[R2, R1]), f"engine {R1} is also in budget[1]"),
    (lambda raw: raw.update(budget=[]), "an empty list"),
    (lambda raw: raw.update(more_budgets=[]), "write several budgets as budget: [ ... ]"),
])
def test_budget_list_refusals(mutate, why):
    raw = two_budgets()
    mutate(raw)
    with pytest.raises(UserError, match=re.escape(why)) as e:
        parse_runbook(raw)
    assert "\n" not in str(e.value)


def test_the_gate_fits_all_budgets_together_and_holds_each_variable_to_its_allowed_values():
    rb = parse_runbook(two_budgets())
    fit = evaluate_budget(rb, None, 1223, "test", "gpu02", {})
    assert fit is not None and fit.problem is None
    assert fit.fitted == "1 x 406.0 GiB + 1 x 300.0 GiB"
    assert fit.ranks[R1] == 406 * 2**30 // 4 and fit.ranks[R2] == 300 * 2**30 // 4
    # together they do not fit a smaller host (each alone would)
    small = evaluate_budget(rb, None, 750, "test", "gpu02", {})
    assert small is not None and small.problem and "1 x 406.0 GiB + 1 x 300.0 GiB does not fit" in small.problem
    # the second budget's variable is checked against its own allowed values
    bad = evaluate_budget(rb, None, 1223, "test", "gpu02", {"R2_BUDGET": "500GiB"})
    assert bad is not None and bad.problem and "R2_BUDGET is set in the env map to a value other than 300GiB or 200GiB" in bad.problem
    lower = evaluate_budget(rb, None, 1223, "test", "gpu02", {"R2_BUDGET": "200GiB"})
    assert lower is not None and lower.problem is None and lower.ranks[R2] == 200 * 2**30 // 4


def test_plan_and_the_gate_describe_every_budget():
    rb = parse_runbook(two_budgets())
    step = next(s for s in rb.preflight if s.check == "budget")
    text = describe_step(step, rb).gate
    assert "R1_BUDGET unset or 406GiB" in text and "R2_BUDGET unset or 300GiB / 200GiB" in text
    assert "together 1 x 406GiB + 1 x 300GiB" in text
    r2_gate = next(s for s in rb.phases[0].steps if s.logs is not None and s.logs.budget and s.logs.service == R2)
    assert f"rank_budget_bytes={300 * 2**30 // 4}" in describe_step(r2_gate, rb).gate


def test_orchestrate_plan_renders_each_budget(tmp_path: Path):
    path = tmp_path / "two-budgets.yaml"
    path.write_text(yaml.safe_dump(two_budgets()))
    exe = Path(sys.executable).parent / "orchestrate"
    res = subprocess.run([str(exe), "plan", "gpu02", "--tag", "v0.0.300", "--runbook", str(path),
                          "--inventory", str(Path(__file__).resolve().parents[2] / "config" / "hosts.yaml")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    line = next(x for x in res.stdout.splitlines() if x.startswith("budget:"))
    assert f"R1_BUDGET=406GiB per replica (406.0 GiB) x 1 for {R1}" in line
    assert f"R2_BUDGET=300GiB per replica (300.0 GiB) x 1 for {R2}" in line and f"rank_budget_bytes={300 * 2**30 // 4}" in line


def test_the_gate_records_each_engines_rank_budget_and_its_cold_start_gate_expects_it():
    from types import SimpleNamespace

    from orchestrator.engine.steps.checks import budget_verdict, expected_rank_budget

    rb = parse_runbook(two_budgets())
    env = SimpleNamespace(get={"R2_BUDGET": "200GiB"}.get, fingerprint=lambda: "fp")
    rt = SimpleNamespace(env=env, rb=rb, entry=SimpleNamespace(available_ram_gib=1223, available_ram_source="t"),
                         run=SimpleNamespace(host="gpu02"), ctx=SimpleNamespace(budget={}, budget_env_fingerprint=""))
    out = budget_verdict(rt)
    assert out.event.name == "OK", out
    assert expected_rank_budget(rt.ctx.budget, rb, R2) == 200 * 2**30 // 4  # the env map's value, R2's own budget
    assert expected_rank_budget(rt.ctx.budget, rb, R1) == 406 * 2**30 // 4
    assert expected_rank_budget({}, rb, R2) == 300 * 2**30 // 4  # before the gate ran: its budget's default
    # one budget: as before, every engine the same figure
    single = parse_runbook(copy.deepcopy(RAW))
    assert expected_rank_budget({"rank_budget_bytes": 7}, single, R2) == 7


def test_a_budget_without_page_cache_room_and_one_given_as_a_share_of_ram_are_judged_not_crashed():
    """The page-cache room's default `0` is no room; a percentage is refused by the fit rule in words."""
    raw = copy.deepcopy(RAW)
    raw["budget"].pop("min_page_cache", None)  # the model's default, "0": no room asked for
    fit = evaluate_budget(parse_runbook(raw), None, 1223, "test", "gpu02")
    assert fit is not None and fit.problem is None
    raw["budget"] = {**raw["budget"], "default": "30%", "allowed": ["30%"]}
    share = evaluate_budget(parse_runbook(raw), None, 1000, "test", "gpu02")  # a gate's verdict, never a crash
    assert share is not None and share.problem and "give each replica a fixed size instead" in share.problem
