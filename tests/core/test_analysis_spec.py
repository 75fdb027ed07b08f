"""The `analysis:` step's load-time validation (issue 23): one line naming the field, exit 2."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.analysis.spec import AnalysisSpec
from orchestrator.engine.step_descriptions import describe_step
from orchestrator.language.runbook import RUNBOOK_DIR, parse_runbook
from orchestrator.util.user_errors import UserError

RAW = yaml.safe_load((RUNBOOK_DIR / "gpu02-glm53-w4afp8-long-context.yaml").read_text())
GOOD = {
    "window": "30m", "poll": "1m", "min_samples": 200,
    "relay": {"token_variable": "PROXY_TOKEN", "ports": {"r1": 8008, "r2": 8009}},
    "gates": [
        {"ratio": {"metric": "tpot_p50", "candidate": "r2", "control": "r1", "max": 0.9}},
        {"max": {"metric": "error_rate", "replica": "r2", "value": 0.01}},
    ],
}


def with_analysis(analysis: dict) -> dict:
    raw = copy.deepcopy(RAW)
    steps = raw["phases"][0]["steps"]
    at = next(i for i, s in enumerate(steps) if s["id"] == "relay-checks") + 1
    steps.insert(at, {"id": "canary-readout", "say": "r2 against r1 over live traffic", "analysis": analysis})
    return raw


def test_a_sound_analysis_loads_and_plan_describes_its_thresholds():
    rb = parse_runbook(with_analysis(GOOD))
    st = next(s for s in rb.phases[0].steps if s.id == "canary-readout")
    assert st.kind == "analysis" and st.analysis is not None
    assert st.analysis.window == 1800 and st.analysis.poll == 60
    text = describe_step(st, rb).gate
    assert "over 30m" in text and "every 1m" in text and ":8009/:8008" in text
    assert "tpot_p50 r2/r1 <= 0.9" in text and "error_rate of r2 <= 0.01" in text
    assert "200 samples" in text and "judged on a 95 % interval" in text
    assert "straddling it, too little traffic or an unknown series is inconclusive and halts for a human" in text
    assert st.analysis.replicas() == ["r2", "r1"]  # the candidate first


def _bad(mutate) -> str:
    a = copy.deepcopy(GOOD)
    mutate(a)
    with pytest.raises(UserError) as ei:
        parse_runbook(with_analysis(a), source="rb")
    msg = str(ei.value)
    assert "\n" not in msg
    return msg


def test_a_wrong_metric_name_is_refused():
    msg = _bad(lambda a: a["gates"][0]["ratio"].update(metric="tpot_p5"))
    assert "analysis.gates[1].ratio.metric" in msg and "unknown metric 'tpot_p5'" in msg and "tpot_p50" in msg


def test_a_ratio_without_a_control_is_refused():
    msg = _bad(lambda a: a["gates"][0]["ratio"].pop("control"))
    assert "ratio of tpot_p50 needs control:" in msg
    assert "compares r2 with itself" in _bad(lambda a: a["gates"][0]["ratio"].update(control="r2"))


def test_a_window_shorter_than_the_poll_is_refused():
    msg = _bad(lambda a: a.update(window="30s"))
    assert "the window (30s) is shorter than the poll (1m)" in msg


def test_other_refusals():
    assert "needs min: or max:" in _bad(lambda a: a["gates"][0]["ratio"].pop("max"))
    assert "exactly one of ratio:, max:, min:" in _bad(lambda a: a["gates"][1].update(min=a["gates"][1]["max"]))
    assert "relay.ports does not route" in _bad(lambda a: a["relay"]["ports"].pop("r1"))
    assert "not a replica of the runbook" in _bad(lambda a: a["relay"]["ports"].update(r3=8010))
    assert "share a relay port" in _bad(lambda a: a["relay"]["ports"].update(r1=8009))
    assert "min_samples" in _bad(lambda a: a.update(min_samples=0))
    assert "unknown key" in _bad(lambda a: a.update(windw="1h"))
    assert "not_enough_traffic" in _bad(lambda a: a.update(not_enough_traffic="pass"))
    assert "gates" in _bad(lambda a: a.update(gates=[]))


def test_replicas_candidates_first():
    s = AnalysisSpec.model_validate({**GOOD, "gates": [GOOD["gates"][1], {"min": {"metric": "completion_rate", "replica": "r1", "value": 0.99}}]})
    assert s.replicas() == ["r2", "r1"]


def test_orchestrate_plan_refuses_a_bad_analysis_with_one_line_and_exit_2(tmp_path: Path):
    a = copy.deepcopy(GOOD)
    a["gates"][0]["ratio"]["metric"] = "tpot_median"
    path = tmp_path / "bad-canary.yaml"
    path.write_text(yaml.safe_dump(with_analysis(a)))
    exe = Path(sys.executable).parent / "orchestrate"
    res = subprocess.run([str(exe), "plan", "gpu02", "--tag", "v0.0.300", "--runbook", str(path),
                          "--inventory", str(Path(__file__).resolve().parents[2] / "config" / "hosts.yaml")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    out = (res.stdout + res.stderr).strip()
    assert "unknown metric 'tpot_median'" in out and "Traceback" not in out
    assert len(out.splitlines()) == 1


def test_the_shipped_pdi2_canary_gates_are_the_lab_results_as_thresholds():
    from orchestrator.language.runbook import load_runbook

    rb = load_runbook("gpu02-glm53-w4afp8-pdi2-canary")
    [readout] = [s for ph in rb.phases for s in ph.steps if s.analysis is not None]
    a = readout.analysis
    assert a is not None and a.window == 1800 and a.min_samples == 200 and a.not_enough_traffic == "halt"
    assert [g.text() for g in a.gates] == ["tpot_p50 r2/r1 <= 0.9", "ttft_p50 r2/r1 <= 1.05", "completion_rate of r2 >= 0.99",
                                           "min_free_device_memory_gb of r2 >= 3",
                                           "min_free_device_memory_gb r2/r1 >= 0.9"]
    assert a.dcgm is not None and a.dcgm.port == 8010  # the canary tag's relay route to dcgm-glm53
    # r2 goes down only after a quiet wait, and r1 (alone on the long domain) is watched while r2 cold-starts
    steps = [s for ph in rb.phases for s in ph.steps]
    ids = [s.id for s in steps]
    assert ids.index("wait-for-quiet") < ids.index("stop-r2") and ids.index("relay-up") < ids.index("wait-for-quiet")
    cold = next(s for s in steps if s.id == "cold-start")
    assert cold.watch is not None and cold.watch.replica == "r1" and cold.watch.max == {"error_rate": 0.02, "queue_depth_max": 8}
    # r2 only: no mutating step of the canary or its rollback names r1
    r1 = rb.replicas["r1"][0]
    for steps in rb.step_lists():
        for st in steps:
            if st.mutating:
                assert r1 not in st.compose.services, st.id  # type: ignore[union-attr]


def _orchestrate(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "orchestrate"
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120)


def test_demo_runbook_names_a_runbook_the_demo_simulates_in_one_line():
    res = _orchestrate("demo", "--runbook", "gpu02-nope")
    out = (res.stdout + res.stderr).strip()
    assert res.returncode == 2 and len(out.splitlines()) == 1, out
    assert "--runbook 'gpu02-nope': the demo simulates" in out and "gpu02-glm53-w4afp8-pdi2-canary" in out
    res = _orchestrate("demo", "--runbook", "gpu02-glm53-w4afp8-pdi2-canary", "--base-tier")
    assert res.returncode == 2 and "--base-tier" in res.stdout + res.stderr


def test_the_analysis_modules_are_in_the_pure_core_contract():
    """lint-imports (tests/core/test_import_contracts.py) then keeps them free of httpx, asyncio,
    the journal, the clients, the executor and the simulator."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(Path(__file__).resolve().parents[2] / ".importlinter")
    pure = cfg["importlinter:contract:pure-core"]["source_modules"].split()
    assert "orchestrator.analysis" in pure and "orchestrator.metricproviders" in pure


def test_the_canary_plan_is_byte_identical_to_its_golden():
    """The canary's plan (what an operator reviews: every gate with its thresholds), byte for byte.
    Regenerate after an intended change with ORCHESTRATOR_UPDATE_GOLDEN=1 and review the diff."""
    import os

    from orchestrator.language.machine import compile_rollout
    from orchestrator.language.runbook import load_runbook
    from orchestrator.previews.plan import build_plan, render_text

    rb = load_runbook("gpu02-glm53-w4afp8-pdi2-canary")
    out = render_text(build_plan(rb, compile_rollout(rb), host="gpu02", tag="v0.0.304"))
    out = out if out.endswith("\n") else out + "\n"
    path = Path(__file__).resolve().parent / "golden" / "plan-gpu02-pdi2-canary.text.txt"
    if os.environ.get("ORCHESTRATOR_UPDATE_GOLDEN") == "1":
        path.write_text(out)
    assert out == path.read_text(), "the canary's plan changed: review it, then regenerate"
    assert ("tpot_p50 r2/r1 <= 0.9; ttft_p50 r2/r1 <= 1.05; completion_rate of r2 >= 0.99; "
            "min_free_device_memory_gb of r2 >= 3; min_free_device_memory_gb r2/r1 >= 0.9") in out
