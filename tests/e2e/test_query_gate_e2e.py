"""The `query:` gate end to end on the simulator, whose per-host query API (orchestrator_sim/apps/
prometheus.py) holds the engines', DCGM's and a node exporter's series: the pdi-2 canary with a
disk-space gate in preflight (>= 250 GiB free on the model cache's filesystem), a free-device-memory
gate on r2 after its cold start and an XID range check.

- all hold: the canary is promoted (each gate's value in the run's notes);
- `memory-squeeze:r2` (1.5 GB free on r2's tightest GPU): the device-memory gate fails and takes the
  phase's rollback (r2 back to #294, r1 untouched);
- a query whose series is not there: "no data" fails the gate, never a pass.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml
from recording import RecordingProgress

pytestmark = pytest.mark.e2e

SPEED = 3000.0
RUNBOOK = Path(__file__).resolve().parents[2] / "runbooks" / "gpu02-glm53-w4afp8-pdi2-canary.yaml"
CANARY_TAG = "v0.0.304"
R1 = "model-sg-glm53-w4afp8-tp4-r1"
R2 = "model-sg-glm53-w4afp8-tp4-r2"

DISK = {"id": "cache-space", "say": "At least 250 GiB free on the model cache's filesystem",
        "query": {"promql": 'min(node_filesystem_avail_bytes{host="{host}", mountpoint="/var/lib/docker"})',
                  "min": 268435456000, "what": "free bytes on the model cache's filesystem"}}
MEMORY = {"id": "r2-device-memory", "say": "r2's tightest GPU keeps at least 3 GiB free",
          "query": {"promql": 'min(DCGM_FI_DEV_FB_FREE{host="{host}", gpu=~"4|5|6|7"})', "min": 3072,
                    "what": "free MiB on r2's tightest GPU"}}
XID = {"id": "no-xid", "say": "No XID error on any GPU over the last 10 minutes",
       "query": {"promql": 'max(DCGM_FI_DEV_XID_ERRORS{host="{host}"})', "max": 0, "range": "10m", "step": "1m"}}


def _runbook(tmp: Path, forward: list[dict]) -> Path:
    raw = yaml.safe_load(RUNBOOK.read_text())
    raw["preflight"].append(DISK)
    steps = raw["phases"][0]["steps"]
    at = next(i for i, s in enumerate(steps) if s["id"] == "cold-start") + 1
    steps[at:at] = forward
    steps[:] = [s for s in steps if "analysis" not in s]  # the readout is the other gates' business
    out = tmp / "pdi2-with-queries.yaml"
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return out


def _run(tmp_path: Path, forward: list[dict], *faults: str):
    from orchestrator.hosts.clients.retry import RetryPolicy
    from orchestrator.service.admission import new_rollout
    from orchestrator.service.demo import demo_settings
    from orchestrator.service.runner import execute
    from orchestrator.service.session import Session
    from orchestrator.util.clock import ScaledClock
    from orchestrator_sim import SimConfig, SimFleet

    runbook = _runbook(tmp_path, forward)
    with SimFleet(SimConfig(speed=SPEED, faults=list(faults), cold_start_s=1200, initial="long-context")) as fleet:
        state = tmp_path / "state"
        state.mkdir()
        session = Session.open(demo_settings(fleet, state), clock=ScaledClock(SPEED),
                               retry=RetryPolicy(deadline_s=900, busy_wait_s=5))
        try:
            r1_before = fleet.host.container(R1)
            run, rb, table = new_rollout(session, "gpu02", CANARY_TAG, str(runbook))
            progress = RecordingProgress()
            final = asyncio.run(execute(session, run, rb, table, progress=progress, yes=True))
            notes = [f"{f.get('state')}: {f.get('note') or ''}" for k, f in progress.events if k == "transition"]
            r1 = fleet.host.container(R1)
            assert r1 is not None and r1.id == r1_before.id and r1.state == "running"
            return final, notes, fleet.host.container(R2)
        finally:
            session.close()


def test_disk_device_memory_and_xid_hold_and_the_canary_is_promoted(tmp_path: Path):
    final, notes, r2 = _run(tmp_path, [MEMORY, XID])
    assert final.outcome == "DONE", final.message
    text = "\n".join(notes)
    assert "free bytes on the model cache's filesystem >= 268_435_456_000) holds: {} = 412_316_860_416" in text
    assert "free MiB on r2's tightest GPU >= 3072) holds: {} = 3789" in text
    assert "(the value <= 0) holds: {} = 0" in text
    assert r2.tag == CANARY_TAG


def test_a_memory_squeeze_fails_the_device_memory_gate_and_rolls_r2_back(tmp_path: Path):
    final, notes, r2 = _run(tmp_path, [MEMORY], "memory-squeeze:r2")
    assert final.outcome == "ROLLED_BACK", final.message
    assert any("{} = 1536, below 3072" in n for n in notes), notes
    assert r2.tag == "v0.0.300"


def test_a_series_that_is_not_there_is_no_data_and_fails(tmp_path: Path):
    absent = {**MEMORY, "query": {**MEMORY["query"], "promql": 'min(DCGM_FI_DEV_FB_FREE{host="gpu99"})'}}
    final, notes, r2 = _run(tmp_path, [absent])
    assert final.outcome == "ROLLED_BACK", final.message
    assert any("no data: the query answered no series" in n for n in notes), notes
    assert r2.tag == "v0.0.300"
