"""The compose-files team's written procedures shipped as runbooks (runbooks/gpu04-glm53-w4afp8-canary.yaml,
...): their plans byte for byte against golden files, their compose files at the simulated tag
checked against them, and the demo target each rehearses at.

Regenerate a golden plan after an intended change with
`ORCHESTRATOR_UPDATE_GOLDEN=1 pytest tests/core/test_procedure_runbooks.py` and review the diff.

Mutation list (each guard disabled in the source, the named test seen failing, the source restored):
- previews/compose_reading._exec_of_wrapper returning None (a wrapper's argv not read) ->
  test_the_gpu04_canary_file_holds_what_the_runbook_expects and
  test_a_candidate_flag_changed_inside_its_wrapper_is_a_mismatch.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.language.machine import compile_rollout
from orchestrator.language.runbook import RUNBOOK_DIR, load_runbook
from orchestrator.previews.compose_check import check_against_compose_file
from orchestrator.previews.plan import build_plan, render_text
from orchestrator.service.demo import demo_target

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"
SIM_TAGS = ROOT / "orchestrator_sim" / "compose" / "tags"
GPU04 = "gpu04-glm53-w4afp8-canary"
GPU04_FILE = SIM_TAGS / "v0.0.312" / "prod" / "GLM-5.3-Flash-SGL-TP4-W4AFP8-Canary.yaml"


def _check(name: str, produced: str) -> None:
    path = GOLDEN / name
    if os.environ.get("ORCHESTRATOR_UPDATE_GOLDEN") == "1":
        path.write_text(produced)
    assert produced == path.read_text(), f"{name} changed: review it, then regenerate (see the module docstring)"


@pytest.mark.parametrize(("runbook", "host", "tag", "golden"), [
    (GPU04, "gpu04", "v0.0.312", "plan-gpu04-w4afp8-canary.text.txt"),
])
def test_the_procedure_plan_is_byte_identical(runbook, host, tag, golden):
    rb = load_runbook(runbook)
    _check(golden, render_text(build_plan(rb, compile_rollout(rb), host=host, tag=tag)))


@pytest.mark.parametrize(("runbook", "hosts", "tag"), [
    (GPU04, ("gpu04",), "v0.0.312"),
])
def test_the_procedure_rehearses_at_its_simulated_tag(runbook, hosts, tag):
    target = demo_target(str(RUNBOOK_DIR / f"{runbook}.yaml"))
    assert (target.hosts, target.tag) == (hosts, tag)


def test_the_gpu04_canary_file_holds_what_the_runbook_expects():
    checks, problems, _ = check_against_compose_file(load_runbook(GPU04), GPU04_FILE, display="canary.yaml")
    assert problems == []
    assert any(c.startswith("expects[2] holds for model-sg-glm53-w4afp8-tp4-r2") for c in checks), checks


def test_a_candidate_flag_changed_inside_its_wrapper_is_a_mismatch(tmp_path):
    """r2's engine is exec'd by a shell wrapper that checks the loader diff first: its flags are
    read from the `exec sglang serve` line, so a change there is caught before a deploy."""
    text = GPU04_FILE.read_text()
    assert text.count("--chunked-prefill-size 16384") == 1
    path = tmp_path / "canary.yaml"
    path.write_text(text.replace("--chunked-prefill-size 16384", "--chunked-prefill-size 8192"))
    problems = check_against_compose_file(load_runbook(GPU04), path, display="canary.yaml")[1]
    assert [p.split(" (")[0] for p in problems] == [
        "canary.yaml: model-sg-glm53-w4afp8-tp4-r2: --chunked-prefill-size: found 8192, expected 16384"]
