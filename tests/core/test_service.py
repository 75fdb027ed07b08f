"""One application service between the front ends and the engine (issue 26): a command parses
its arguments into a request, hands it to orchestrator/service/, and renders what comes back.
The front ends (the CLI's command modules, `orchestrate serve`'s worker) never open runs on their
own: admission, placement and (for the CLI) execution and the exit code are the service's."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from orchestrator.util.outcome import Outcome
from orchestrator.util.user_errors import UserError

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "orchestrator"
#: What only the service calls: the ways a run is admitted, placed or executed.
RUN_PATH = {"new_rollout", "new_rollback", "retry_run", "place_for_continue", "execute",
            "execute_stoppable", "record_options"}


def _front_ends() -> list[Path]:
    return sorted((PKG / "cli").rglob("*.py")) + [PKG / "teamserver" / "worker.py"]


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and not node.module.startswith("orchestrator.service"):
            names.update(a.name for a in node.names)
    return names


@pytest.mark.parametrize("path", _front_ends(), ids=lambda p: str(p.relative_to(PKG)))
def test_a_front_end_opens_no_run_itself(path):
    allowed = {"execute"} if path.name == "worker.py" else set()  # the server runs the admitted run in its own task
    assert sorted((_imported(path) & RUN_PATH) - allowed) == []


def test_the_cli_and_the_server_admit_through_the_same_functions():
    worker = (PKG / "teamserver" / "worker.py").read_text(encoding="utf-8")
    runs = (PKG / "service" / "runs.py").read_text(encoding="utf-8")
    for fn in ("admit_rollout", "admit_rollback", "admit_resume"):
        assert f"{fn}(" in worker and fn in runs, fn


@pytest.mark.parametrize("path", sorted((PKG / "cli").rglob("*.py")) + sorted((PKG / "service").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(PKG)))
def test_no_module_of_the_cli_or_the_service_passes_500_lines(path):
    assert len(path.read_text(encoding="utf-8").splitlines()) <= 500


def test_a_request_with_a_bad_tag_is_refused_before_anything_opens(monkeypatch):
    from orchestrator.service import runs
    from orchestrator.service.requests import RolloutRequest

    def no_settings(*_a):
        raise AssertionError("settings were read before the tag was checked")

    monkeypatch.setattr(runs, "load_settings_for", no_settings)
    with pytest.raises(UserError, match="tag"):
        runs.rollout(RolloutRequest(host="gpu02", tag="latest", runbook="x"), None, runs.Hooks())


@pytest.mark.parametrize("kind,outcome,code", [("rollout", Outcome.DONE, 0), ("rollout", Outcome.ROLLED_BACK, 3),
                                               ("rollback", Outcome.ROLLED_BACK, 0), ("rollout", Outcome.HALTED, 4),
                                               ("rollout", Outcome.ABORTED, 5)])
def test_the_service_gives_the_exit_code(kind, outcome, code):
    from orchestrator.service.oncall import exit_code

    assert exit_code(kind, outcome) == code
