"""Issue 21: "the whole suite and demo also pass with every engine keeping only its last 500 lines".

`make test-short-logs` runs the whole suite and the demo's fault cases that way (docs/explorer.md,
"Short logs"); so that it cannot rot between those runs, a few rollouts of the normal suite run with
500-line logs here whatever ORCHESTRATOR_SIM_LOG_LINES says, and the setting is shown to reach every
simulator a test starts (pytest's `--sim-log-lines`, in-process and in a subprocess).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from recording import RecordingProgress

from orchestrator.language.runbook import DEFAULT_RUNBOOK

pytestmark = pytest.mark.e2e

LOG_LINES = 500
ROOT = Path(__file__).resolve().parents[2]
R1 = "model-sg-glm53-w4afp8-tp4-r1"
R2_NEW = "model-sg-glm53-w4afp8-tp4-r2"
R2_OLD = "model-sg-glm53-fp8-tp4-r2"


def rollout(e):
    from orchestrator.service.admission import new_rollout
    from orchestrator.service.runner import execute

    run, rb, table = new_rollout(e.session, "gpu02", "v0.0.300", DEFAULT_RUNBOOK)
    return asyncio.run(execute(e.session, run, rb, table, progress=RecordingProgress(), yes=True))


@pytest.mark.parametrize("fault, outcome", [
    (None, "DONE"),
    ("oom", "ROLLED_BACK"),             # the failure line is judged in a short log
    ("rank-budget-wrong", "ROLLED_BACK"),  # the per-rank milestones are read before they rotate out
])
def test_a_rollout_with_500_line_logs_ends_as_with_whole_logs(e2e_factory, fault, outcome):
    e = e2e_factory(*([fault] if fault else []), log_lines=LOG_LINES)
    assert e.fleet.host.log_lines == LOG_LINES
    long_running = R1
    assert len(e.fleet.host.logs(long_running)) == LOG_LINES  # its start rotated out long ago
    final = rollout(e)
    assert final.outcome == outcome, f"{fault}: {final.message}"
    assert e.fleet.check_invariants() == []
    if outcome == "DONE":
        assert e.fleet.host.container(R1).ready and e.fleet.host.container(R2_NEW).ready
    else:
        assert e.fleet.host.container(R2_OLD).ready and e.fleet.host.container(R1).ready


def test_the_pytest_option_reaches_every_simulator_a_test_starts(tmp_path):
    """`pytest --sim-log-lines 7`: an in-process SimConfig and a simulator in a subprocess (which
    inherits the environment) both keep 7 lines (mutation: tests/conftest.py's pytest_configure
    not setting the variable -> both report None)."""
    probe = tmp_path / "test_probe.py"
    probe.write_text(textwrap.dedent('''
        import subprocess, sys
        from orchestrator_sim import SimConfig

        def test_probe():
            assert SimConfig().log_lines == 7
            out = subprocess.run([sys.executable, "-c", "from orchestrator_sim import SimConfig; print(SimConfig().log_lines)"],
                                 capture_output=True, text=True, check=True).stdout.strip()
            assert out == "7"
    '''))
    env = {k: v for k, v in os.environ.items() if k != "ORCHESTRATOR_SIM_LOG_LINES"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest", "--sim-log-lines", "7",
                        str(probe)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "1 passed" in r.stdout
