"""Explorer seed 136: an operator's `rollback --replica all` after a rollout killed right after the
perception check's down sent that down again (I3: a destructive call repeated). The rollback now
reads the journal (orchestrator/engine/rules/oneshot_ledger.py) for one-shots already removed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from orchestrator.engine.rules.oneshot_ledger import removed_oneshots
from orchestrator_sim import explore

CHECK = "glm53-perception-check"


@dataclass
class _Run:
    run_id: str


@dataclass
class _Eff:
    kind: str
    services: list[str]
    outcome: dict[str, Any] | None
    mutating: bool = True
    request: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.request = {"request": {"services": self.services}}


class _Journal:
    def __init__(self, runs: dict[str, list[_Eff]]) -> None:
        self.runs = runs  # oldest first

    def list_runs(self, host: str, limit: int = 50) -> list[_Run]:
        return [_Run(r) for r in reversed(self.runs)][:limit]

    def effects(self, run_id: str) -> list[_Eff]:
        return self.runs[run_id]


OK = {"status": "success", "exit_code": 0}


def test_a_down_answered_success_is_remembered_across_runs() -> None:
    j = _Journal({"old": [_Eff("compose_down", [CHECK], OK)],
                  "killed": [_Eff("compose_up", [CHECK], OK), _Eff("compose_down", [CHECK], OK)]})
    assert removed_oneshots(j, "gpu02", "killed", {CHECK}) == [CHECK]


def test_an_up_after_or_an_unknown_outcome_leaves_it_maybe_there() -> None:
    later_up = _Journal({"killed": [_Eff("compose_down", [CHECK], OK), _Eff("compose_up", [CHECK], None)]})
    assert removed_oneshots(later_up, "gpu02", "killed", {CHECK}) == []
    unknown = _Journal({"killed": [_Eff("compose_down", [CHECK], None)]})
    assert removed_oneshots(unknown, "gpu02", "killed", {CHECK}) == []
    failed = _Journal({"killed": [_Eff("compose_down", [CHECK], {"status": "success", "exit_code": 1})]})
    assert removed_oneshots(failed, "gpu02", "killed", {CHECK}) == []
    # a newer run that started it again counts too
    newer = _Journal({"killed": [_Eff("compose_down", [CHECK], OK)], "next": [_Eff("compose_up", [CHECK], OK)]})
    assert removed_oneshots(newer, "gpu02", "killed", {CHECK}) == []
    assert removed_oneshots(newer, "gpu02", "absent", {CHECK}) == []


@pytest.mark.e2e
def test_a_rollback_by_hand_does_not_send_the_killed_runs_oneshot_down_again(tmp_path) -> None:
    r = explore.run_hole("serve-rollback-after-perception-stop", tmp_path)
    assert any("-> -9" in c for c in r.commands), r.commands  # the rollout was killed after write 52
    assert not r.violations, r.violations
