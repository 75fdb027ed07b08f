"""The pdi-2 canary read from a Prometheus-compatible query API (issue 23, `source: prometheus`):
the same runbook with its analysis' `relay:` swapped for `source: prometheus`, run on the
simulator, whose per-host fake query API (orchestrator_sim/apps/prometheus.py) answers from the
simulated engines' /metrics labelled by replica.

- a better candidate is promoted on the query API's numbers (TPOT r2/r1 about 0.63);
- the query API down (`prometheus-down`): the analysis cannot read, so it fails into the phase's
  rollback (r2 back to #294), never a pass;
- the control on another host (per-replica matchers, `prometheus.replicas`): gpu02's r2 against
  gpu23's two engines pooled, read from one query API holding both hosts; the pdi-2 r2 is promoted
  against them, a 30 % slower one rejected.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from recording import RecordingProgress
from sim_time import AnswerTimeClock

pytestmark = pytest.mark.e2e

SPEED = 600.0  # the orchestrator's own compute per poll is simulated time too: the window keeps its ~30 polls
RUNBOOK = Path(__file__).resolve().parents[2] / "runbooks" / "gpu02-glm53-w4afp8-pdi2-canary.yaml"
CANARY_TAG = "v0.0.304"
R1 = "model-sg-glm53-w4afp8-tp4-r1"
R2 = "model-sg-glm53-w4afp8-tp4-r2"


#: r2 on gpu02 against gpu23's two engines (the base tier's, untouched by the canary), pooled
ELSEWHERE = {"selector": 'job="sglang"',
             "replicas": {"r2": 'host="gpu02", container_name="model-sg-glm53-w4afp8-tp4-r2"',
                          "gpu23": 'host="gpu23", container_name=~"model-sg-glm53-fp8-tp4-r[12]"'}}
ELSEWHERE_GATES = [{"ratio": {"metric": "tpot_p50", "candidate": "r2", "control": "gpu23", "max": 0.9}},
                   {"ratio": {"metric": "completion_rate", "candidate": "r2", "control": "gpu23", "min": 0.99}}]


def _prometheus_runbook(tmp: Path, prometheus: dict | None = None, gates: list | None = None) -> Path:
    raw = yaml.safe_load(RUNBOOK.read_text())
    [analysis] = [s["analysis"] for ph in raw["phases"] for s in ph["steps"] if "analysis" in s]
    assert analysis.pop("relay") == {"token_variable": "PROXY_TOKEN", "ports": {"r1": 8008, "r2": 8009}}
    # DCGM's device memory stays on the relay (source: prometheus does not map it): its gates go
    assert analysis.pop("dcgm") == {"port": 8010}
    analysis["gates"] = [g for g in analysis["gates"] if "min_free_device_memory_gb" not in str(g)]
    analysis["source"] = "prometheus"
    analysis["prometheus"] = prometheus or {"replica_label": "replica", "selector": 'job="sglang"'}
    if gates is not None:
        analysis["gates"] = gates
    out = tmp / "gpu02-glm53-w4afp8-pdi2-canary-prometheus.yaml"
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return out


def _run(tmp_path: Path, *faults: str, hosts: tuple[str, ...] = ("gpu02",), prometheus: dict | None = None,
         gates: list | None = None):
    from orchestrator.hosts.clients.retry import RetryPolicy
    from orchestrator.service.admission import new_rollout
    from orchestrator.service.demo import demo_settings
    from orchestrator.service.runner import execute
    from orchestrator.service.session import Session
    from orchestrator_sim import SimConfig, SimFleet

    runbook = _prometheus_runbook(tmp_path, prometheus, gates)
    # one simulated time for both sides, standing still while the simulator answers (tests/e2e/sim_time.py)
    clock = AnswerTimeClock(SPEED)
    with SimFleet(SimConfig(speed=SPEED, faults=list(faults), cold_start_s=1200, initial="long-context",
                            hosts=hosts), clock=clock) as fleet:
        state = tmp_path / "state"
        state.mkdir()
        transport = clock.transport()
        session = Session.open(demo_settings(fleet, state), clock=clock, transport=transport,
                               retry=RetryPolicy(deadline_s=900, busy_wait_s=5))
        try:
            r1_before = fleet.host.container(R1)
            run, rb, table = new_rollout(session, "gpu02", CANARY_TAG, str(runbook))
            progress = RecordingProgress()

            async def go():
                try:
                    return await execute(session, run, rb, table, progress=progress, yes=True)
                finally:
                    await transport.close()

            final = clock.run(go())
            notes = [f.get("note") or "" for k, f in progress.events if k == "transition"]
            r1 = fleet.host.container(R1)
            assert r1 is not None and r1.id == r1_before.id and r1.state == "running"
            queried = [c for c in fleet.calls if "/api/v1/query" in str(getattr(c, "path", ""))]
            return final, notes, fleet.host.container(R2), queried, fleet.check_invariants()
        finally:
            session.close()


def test_a_better_candidate_is_promoted_on_the_query_apis_numbers(tmp_path: Path):
    final, notes, r2, queried, problems = _run(tmp_path)
    assert final.outcome == "DONE", final.message
    readout = [n for n in notes if "canary readout:" in n][-1]
    assert "canary readout: PASS" in readout and "r2/r1 0.6" in readout
    assert r2.tag == CANARY_TAG
    assert queried, "the analysis read the fake query API"
    assert problems == []


def test_the_query_api_down_is_never_a_pass_it_rolls_r2_back(tmp_path: Path):
    final, notes, r2, _, _ = _run(tmp_path, "prometheus-down")
    assert final.outcome == "ROLLED_BACK", final.message
    text = " ".join(notes)
    assert "could not be read 3 times in a row" in text and "Prometheus query API" in text and "503" in text
    assert r2.tag == "v0.0.300"


def test_a_host_whose_inventory_names_no_prometheus_is_refused_before_the_run_starts(tmp_path: Path):
    import dataclasses

    from orchestrator.service.admission import new_rollout
    from orchestrator.service.demo import demo_settings
    from orchestrator.service.session import Session
    from orchestrator.util.clock import ScaledClock
    from orchestrator.util.user_errors import UserError
    from orchestrator_sim import SimConfig, SimFleet

    runbook = _prometheus_runbook(tmp_path)
    with SimFleet(SimConfig(speed=SPEED, initial="long-context")) as fleet:
        fleet.host_urls["gpu02"] = dataclasses.replace(fleet.host_urls["gpu02"], prometheus="")
        state = tmp_path / "state"
        state.mkdir()
        session = Session.open(demo_settings(fleet, state), clock=ScaledClock(SPEED))
        try:
            with pytest.raises(UserError, match="names no prometheus_url for gpu02") as e:
                new_rollout(session, "gpu02", CANARY_TAG, str(runbook))
            assert "\n" not in str(e.value)
            assert session.journal.list_runs("gpu02", limit=5) == []  # no run was created
            assert not any(c.is_compose_up for c in fleet.calls)
        finally:
            session.close()


def _row(readout: str, metric: str) -> str:
    return next(line for line in readout.splitlines() if line.startswith(metric + " "))


def test_a_control_on_another_host_judges_the_candidate(tmp_path: Path):
    """gpu02's pdi-2 r2 (TPOT 0.63x) against gpu23's engines (1.0x): promoted; the readout's column
    is gpu23, read through its own matchers from the query API that holds both hosts."""
    final, notes, r2, queried, problems = _run(tmp_path, hosts=("gpu02", "gpu23"), prometheus=ELSEWHERE,
                                               gates=ELSEWHERE_GATES)
    assert final.outcome == "DONE", final.message
    readout = [n for n in notes if "canary readout:" in n][-1]
    assert "canary readout: PASS" in readout, readout
    row = _row(readout, "tpot_p50")
    assert "r2/gpu23 0.6" in row and row.split()[-1] == "PASS", readout
    assert queried, "the analysis read the query API"
    assert r2.tag == CANARY_TAG and problems == []


def test_a_slower_candidate_is_rejected_against_a_control_on_another_host(tmp_path: Path):
    final, notes, r2, _, _ = _run(tmp_path, "candidate-slower:r2@gpu02", hosts=("gpu02", "gpu23"),
                                  prometheus=ELSEWHERE, gates=ELSEWHERE_GATES)
    assert final.outcome == "ROLLED_BACK", final.message
    readout = [n for n in notes if "canary readout:" in n][-1]
    assert "FAIL: tpot_p50 r2/gpu23 <= 0.9: r2/gpu23 = " in readout, readout
    assert r2.tag == "v0.0.300"
