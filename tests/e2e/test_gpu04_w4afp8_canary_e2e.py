"""The gpu04 W4AFP8 canary (cvm-compose-files docs/gpu04-glm53-w4afp8-canary.md) rehearsed on the
simulated gpu04 at tag v0.0.312: r2 on the Graphistry W4AFP8 checkpoint from the canary file, r1
the production FP8 control that is never stopped or recreated.

- happy path: the host withdrawn, r2 swapped, qualified (relay, perception check), soaked,
  routed through the canary file's proxy and nginx, rejoined, and read against r1: DONE;
- `perception-fails`: the perception check's fixtures fail, the phase's rollback restores the
  FP8 r2 and the canonical sidecars and rejoins the host: ROLLED_BACK, r1 the same container.
"""

from __future__ import annotations

import pytest
from recording import RecordingProgress

from orchestrator.language.runbook import RUNBOOK_DIR

pytestmark = pytest.mark.e2e

SPEED = 3000.0
RUNBOOK = str(RUNBOOK_DIR / "gpu04-glm53-w4afp8-canary.yaml")
TAG = "v0.0.312"
CANARY_FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-Canary.yaml"
CANONICAL = "prod/GLM-5.3-Flash-SGL-TP4.yaml"
R1 = "model-sg-glm53-fp8-tp4-r1"
R2_FP8 = "model-sg-glm53-fp8-tp4-r2"
R2_W4 = "model-sg-glm53-w4afp8-tp4-r2"


@pytest.fixture
def gpu04(rehearsals):
    def make(*faults: str):
        r = rehearsals.run(*faults, runbook=RUNBOOK, tag=TAG, host="gpu04", r1=R1, speed=SPEED, initial=None,
                           hosts=("gpu04",))
        return r.fleet, r.final, r.r1_before, r.progress

    return make


def _notes(progress: RecordingProgress) -> list[str]:
    return [f.get("note") or "" for k, f in progress.events if k == "transition"]


def _r1_untouched(fleet, r1_before) -> None:
    r1 = fleet.hosts["gpu04"].container(R1)
    assert r1 is not None and r1.id == r1_before.id and r1.state == "running" and r1.file == CANONICAL
    for c in fleet.calls:
        if (c.is_compose_up and not (c.body or {}).get("dry_run")) or c.is_compose_down:
            assert R1 not in (c.body or {}).get("services", []), c.body


def test_the_w4afp8_candidate_is_qualified_routed_and_read_against_r1(gpu04):
    fleet, final, r1_before, progress = gpu04()
    assert final.outcome == "DONE", final.message
    host = fleet.hosts["gpu04"]
    r2 = host.container(R2_W4)
    assert r2.state == "running" and r2.tag == TAG and r2.file == CANARY_FILE
    assert host.container(R2_FP8) is None or host.container(R2_FP8).state != "running"
    # the proxy routes the candidate; the registrar registers from the canary file again
    for svc in ("proxy-glm53", "nginx", "model-proxy-registrar"):
        assert host.container(svc).file == CANARY_FILE, svc
    readout = next(n for n in _notes(progress) if "canary readout:" in n)
    assert readout.startswith("canary readout: PASS"), readout
    assert "generation_tokens_per_request" in readout and "[" in readout  # intervals beside the points
    # step 1's downloader ran alone from the canonical file (the canary file's would orphan the FP8 r2)
    ups = [c.body for c in fleet.calls if c.is_compose_up and not (c.body or {}).get("dry_run")]
    assert {"services": ["model-downloader"], "file": CANONICAL} in [
        {"services": b["services"], "file": b["file"]} for b in ups if b["services"] == ["model-downloader"]]
    _r1_untouched(fleet, r1_before)
    assert fleet.check_invariants() == []


def test_a_failed_perception_check_rolls_r2_and_the_sidecars_back_with_r1_untouched(gpu04):
    fleet, final, r1_before, progress = gpu04("perception-fails")
    assert final.outcome == "ROLLED_BACK", final.message
    assert "canary.s6-perception failed: glm53-perception-check: qualification_finished: ok=false" in final.message
    host = fleet.hosts["gpu04"]
    r2 = host.container(R2_FP8)
    assert r2.state == "running" and r2.file == CANONICAL and r2.tag == "v0.0.300"
    w4 = host.container(R2_W4)
    assert w4 is None or w4.state != "running"
    for svc in ("proxy-glm53", "otelcol-contrib", "model-proxy-registrar"):
        assert host.container(svc).file == CANONICAL, svc
    assert not any("canary readout:" in n for n in _notes(progress))  # the phase never reached its readout
    _r1_untouched(fleet, r1_before)
    assert fleet.check_invariants() == []
