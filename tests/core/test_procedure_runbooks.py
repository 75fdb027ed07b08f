"""The compose-files team's written procedures shipped as runbooks (runbooks/gpu04-glm53-w4afp8-canary.yaml,
runbooks/gpu02-glm53-2xtp2-memopt-canary.yaml): their plans byte for byte against golden files, their
compose files at the simulated tag checked against them, the demo target each rehearses at, and the
demo's operator that makes the env-map edits their `manual:` steps ask for.

Regenerate a golden plan after an intended change with
`ORCHESTRATOR_UPDATE_GOLDEN=1 pytest tests/core/test_procedure_runbooks.py` and review the diff.

Mutation list (each guard disabled in the source, the named test seen failing, the source restored):
- previews/compose_reading._exec_of_wrapper returning None (a wrapper's argv not read) ->
  test_the_gpu04_canary_file_holds_what_the_runbook_expects and
  test_a_candidate_flag_changed_inside_its_wrapper_is_a_mismatch;
- previews/compose_facts.FactCheck.relays treating `proxy_pool`'s port as a replica's relay route ->
  test_the_gpu02_pair_file_holds_what_the_runbook_expects;
- service/demo.DemoOperator.event returning at once -> test_the_demo_operator_makes_the_edit_a_manual_step_verifies.
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
PAIR = "gpu02-glm53-2xtp2-memopt-canary"
PAIR_FILE = SIM_TAGS / "v0.0.332" / "prod" / "GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"


def _check(name: str, produced: str) -> None:
    path = GOLDEN / name
    if os.environ.get("ORCHESTRATOR_UPDATE_GOLDEN") == "1":
        path.write_text(produced)
    assert produced == path.read_text(), f"{name} changed: review it, then regenerate (see the module docstring)"


@pytest.mark.parametrize(("runbook", "host", "tag", "golden"), [
    (GPU04, "gpu04", "v0.0.312", "plan-gpu04-w4afp8-canary.text.txt"),
    (PAIR, "gpu02", "v0.0.332", "plan-gpu02-2xtp2-memopt-canary.text.txt"),
])
def test_the_procedure_plan_is_byte_identical(runbook, host, tag, golden):
    rb = load_runbook(runbook)
    _check(golden, render_text(build_plan(rb, compile_rollout(rb), host=host, tag=tag)))


@pytest.mark.parametrize(("runbook", "hosts", "tag"), [
    (GPU04, ("gpu04",), "v0.0.312"),
    (PAIR, ("gpu02",), "v0.0.332"),
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


def test_the_gpu02_pair_file_holds_what_the_runbook_expects():
    """The pool gate reads the host's own proxy on :8000 (nginx publishes it): a port of the proxy,
    not a relay route of the phase's replica."""
    checks, problems, _ = check_against_compose_file(load_runbook(PAIR), PAIR_FILE, display="long.yaml")
    assert problems == []
    assert any(c.startswith("relay ports :8000, :8008, :8009 published") for c in checks), checks
    assert any(c.startswith("expects[1] holds for model-sg-glm53-w4afp8-tp2-r2a, model-sg-glm53-w4afp8-tp2-r2b") for c in checks)


class _Fleet:
    def __init__(self) -> None:
        self.env: dict[str, dict[str, str]] = {"gpu02": {"GLM53_BACKEND_URLS": "stale"}}

    def set_env_var(self, key: str, value: str | None, *, host: str) -> None:
        if value is None:
            self.env[host].pop(key, None)
        else:
            self.env[host][key] = value


def test_the_demo_operator_makes_the_edit_a_manual_step_verifies():
    from orchestrator.service.demo import DemoOperator

    fleet = _Fleet()
    operator = DemoOperator(fleet, load_runbook(PAIR), "gpu02")
    operator.event("step_started", state="canary.s1-stop-r2")  # not a manual step: nothing changes
    assert fleet.env["gpu02"] == {"GLM53_BACKEND_URLS": "stale"}
    operator.event("step_started", state="canary.pool-override")
    assert fleet.env["gpu02"]["GLM53_BACKEND_URLS"].endswith("model-sg-glm53-w4afp8-tp2-r2b:8000")
    operator.event("step_started", state="canary.rollback.rb2-pool-override-undo")
    assert fleet.env["gpu02"] == {}


def test_a_one_host_procedure_is_never_the_default_runbook_of_a_tier_host():
    """gpu04 is named by the base tier's runbook and by its own canary procedure: left out,
    `--runbook` is the tier's (its prerequisite, its capacity rules); the canary by name only."""
    from orchestrator.language.runbook import default_runbook, shipped_runbooks

    assert {"base-glm53-w4afp8", "gpu04-glm53-w4afp8-canary"} <= {r.name for r in shipped_runbooks() if "gpu04" in r.hosts}
    assert default_runbook("gpu04") == "base-glm53-w4afp8"
    assert default_runbook("gpu03") == "base-glm53-w4afp8"
    assert default_runbook("gpu02") == "gpu02-glm53-w4afp8-long-context"
