"""`orchestrate demo --runbook PATH`: any runbook whose hosts the simulator stands up rehearses end
to end (a new procedure is not only planned), at the tag given or the newest simulated tag that
holds its file; what it cannot rehearse is one line, exit 2.

Mutation list (each guard disabled in the source, the named test seen failing, the source restored):
- service/demo.demo_target's host check -> test_a_runbook_for_a_host_the_simulator_cannot_stand_up_is_refused;
- its tag check -> test_a_tag_that_does_not_hold_the_runbooks_file_is_refused.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.language.runbook import RUNBOOK_DIR
from orchestrator.service.demo import demo_target
from tests.e2e.test_query_gate_e2e import DISK, MEMORY

pytestmark = pytest.mark.e2e

CANARY = RUNBOOK_DIR / "gpu02-glm53-w4afp8-pdi2-canary.yaml"


def _orchestrate(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "orchestrate"
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout)


def _new_procedure(tmp_path: Path, **over) -> Path:
    """A procedure written today: the pdi-2 canary with a disk-space gate and a device-memory gate
    (the readout left out: it is the canary tests' business), under its own name."""
    raw = yaml.safe_load(CANARY.read_text())
    raw["name"] = "gpu02-new-procedure"
    raw["preflight"].append(DISK)
    steps = raw["phases"][0]["steps"]
    at = next(i for i, s in enumerate(steps) if s["id"] == "cold-start") + 1
    steps[at:at] = [MEMORY]
    steps[:] = [s for s in steps if "analysis" not in s]
    raw.update(over)
    path = tmp_path / "gpu02-new-procedure.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_a_new_runbook_file_rehearses_end_to_end(tmp_path: Path):
    path = _new_procedure(tmp_path)
    res = _orchestrate("demo", "--runbook", str(path), "--tag", "v0.0.304", "--speed", "3000",
                       "--state-dir", str(tmp_path / "demo"), timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert f"runbook {path} at v0.0.304" in res.stdout
    assert "free MiB on r2's tightest GPU >= 3072) holds" in res.stdout


def test_the_target_of_a_runbook_file_and_of_a_fleet_runbook(tmp_path: Path):
    assert demo_target(str(CANARY)).tag == "v0.0.304"  # a shipped runbook by its path: as by its name
    t = demo_target(str(_new_procedure(tmp_path)))
    # the newest simulated tag holding the file, old enough; gpu02 as #294 left it (no deploys: back to the canary)
    assert (t.hosts, t.tag, t.initial) == (("gpu02",), "v0.0.332", "long-context")
    t = demo_target(str(RUNBOOK_DIR / "gpu02-glm53-w4afp8-long-context.yaml"))
    assert t.initial == "canary"  # its rollbacks go back to the canary file: gpu02 starts there
    t = demo_target("base-glm53-w4afp8")
    assert (t.hosts, t.tag) == (("gpu03", "gpu04", "gpu23"), "v0.0.310")


def test_a_runbook_for_a_host_the_simulator_cannot_stand_up_is_refused(tmp_path: Path):
    path = _new_procedure(tmp_path, hosts=["gpu13"])
    res = _orchestrate("demo", "--runbook", str(path))
    out = (res.stdout + res.stderr).strip()
    assert res.returncode == 2 and len(out.splitlines()) == 1, out
    assert "written for gpu13; the simulator stands up gpu02, gpu03, gpu04, gpu23, not gpu13" in out


def test_a_tag_that_does_not_hold_the_runbooks_file_is_refused(tmp_path: Path):
    path = _new_procedure(tmp_path)
    res = _orchestrate("demo", "--runbook", str(path), "--tag", "v0.0.290")
    out = (res.stdout + res.stderr).strip()
    assert res.returncode == 2 and len(out.splitlines()) == 1, out
    assert "--tag v0.0.290: the simulated repository holds prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml at" in out
    res = _orchestrate("demo", "--tag", "v0.0.304")
    assert res.returncode == 2 and "add --runbook" in res.stdout + res.stderr
