"""gpu02 as #294 left it (SimConfig(initial="long-context")), the canaries' starting point, and
the pdi-2 canary's tag v0.0.304, whose LongContext file differs from #294's in r2 (and the soak relay's DCGM route) only."""

from __future__ import annotations

import re

from orchestrator_sim.compose_manager.repo import SimRepository
from orchestrator_sim.testing import TARGET

R1 = "model-sg-glm53-w4afp8-tp4-r1"
R2 = "model-sg-glm53-w4afp8-tp4-r2"
CANARY_TAG = "v0.0.304"


def test_the_canary_tag_changes_r2_only() -> None:
    repo = SimRepository.load()
    old, new = repo.file_text("v0.0.300", TARGET), repo.file_text(CANARY_TAG, TARGET)
    assert old is not None and new is not None and old != new
    flag = re.compile(r"^\s+--prefill-decode-interval (\d)$", re.M)
    assert flag.findall(old) == ["1", "1"] and flag.findall(new) == ["1", "2"]  # r1 first, then r2
    assert repo.file_text("v0.0.300", TARGET) == (repo.compose_dir / TARGET).read_text()


def test_after_294_both_w4afp8_replicas_serve_and_a_canary_dry_run_recreates_r2_alone(make_sim) -> None:
    sim = make_sim(initial="long-context", faults=["candidate-slower:r2"])
    assert sim.ready(R1) and sim.ready(R2)
    assert sim.host.container("model-sg-glm53-fp8-tp4-r2") is None
    assert sim.host.container(R2).tag == "v0.0.300"
    dry = sim.up(CANARY_TAG, TARGET, [R1, R2], dry_run=True)
    recreated = [line for line in dry.lines if "Recreate" in line]
    assert any(R2 in line for line in recreated) and not any(R1 in line for line in recreated)
    # the fault aims at the canary's new r2, never at the engines deployed before the simulation
    assert sim.host._containers[R2].engine.fault is None
