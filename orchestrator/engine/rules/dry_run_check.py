"""Judging a dry run's plan before its `up` is applied (pure): apply only a plan that creates,
recreates or starts exactly the listed services (plus those the step allows) and removes nothing,
rollbacks included (a removal is `--remove-orphans` stopping a serving engine with a 10 s stop).
A plan with a line we do not understand is not applied.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.hosts.parsers.dry_run import DryRunResult

Verdict = Literal["apply", "skip", "refuse"]

_CHANGE = {"created", "recreated", "started"}


@dataclass
class DryRunJudgement:
    verdict: Verdict
    reason: str
    changed: list[str] = field(default_factory=list)  # listed services the plan would change (`select_changed`)
    quoted: list[str] = field(default_factory=list)  # plan lines worth quoting to the operator


def _lines_naming(plan: DryRunResult, services: set[str]) -> list[str]:
    return [ln.strip() for ln in plan.lines if any(f" {s} " in f" {ln} " for s in services)]


def judge_dry_run(plan: DryRunResult, listed: list[str], *, may_also: Sequence[str] = (),
                  allow_unchanged: bool = False) -> DryRunJudgement:
    if plan.unknown_lines:
        return DryRunJudgement(
            "refuse",
            f"the plan has {len(plan.unknown_lines)} line(s) we do not understand; a plan is applied only when every line is understood",
            quoted=[ln.strip() for ln in plan.unknown_lines[:5]])
    removed = sorted(s for s, a in plan.actions.items() if a == "removed")
    if removed:
        return DryRunJudgement(
            "refuse",
            "the plan removes " + ", ".join(removed) + " (orphan removal would stop them with a 10 s stop); a plan that removes anything is never applied",
            quoted=_lines_naming(plan, set(removed)))
    changed = {s for s, a in plan.actions.items() if a in _CHANGE}
    extra = sorted(changed - set(listed) - set(may_also))
    if extra:
        return DryRunJudgement("refuse", "the plan also changes " + ", ".join(extra) + ", which this step does not list",
                               quoted=_lines_naming(plan, set(extra)))
    listed_changed = [s for s in listed if s in changed]
    missing = [s for s in listed if s not in changed]
    if missing and not allow_unchanged:
        return DryRunJudgement(
            "refuse", "the plan does not create or recreate " + ", ".join(missing) + " (is the right file and tag deployed?)",
            changed=listed_changed, quoted=[ln.strip() for ln in plan.lines[-10:]])
    if not listed_changed:
        return DryRunJudgement("skip", "every listed service is already on this definition: nothing to apply")
    deps = sorted(changed - set(listed))
    return DryRunJudgement(
        "apply", "the plan changes " + ", ".join(listed_changed)
        + (" (and its dependencies " + ", ".join(deps) + ")" if deps else "") + " and removes nothing",
        changed=listed_changed)
