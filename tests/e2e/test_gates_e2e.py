"""The metrics-evidence, telemetry-labels and one-shot (perception check) gates against the
simulator: each passes on a healthy host and fails, naming its evidence, under its fault."""

from __future__ import annotations

import json

import pytest

from tests.e2e.test_rollout_e2e import R2_NEW, R2_OLD, rollout, running

pytestmark = pytest.mark.e2e

PERCEPTION = "glm53-perception-check"


def _run_log(e, run_id):
    return [json.loads(ln) for ln in (e.state_dir / "logs" / f"{run_id}.jsonl").read_text().splitlines() if ln.strip()]


def test_happy_path_keeps_the_evidence_and_the_perception_output(e2e_factory):
    e = e2e_factory()
    final = rollout(e)
    assert final.outcome == "DONE", final.message
    events = _run_log(e, final.run_id)
    outputs = [ev for ev in events if ev.get("event") == "oneshot_output"]
    assert len(outputs) == 2  # one perception check per replica
    for ev in outputs:
        assert ev["service"] == PERCEPTION
        assert json.loads(ev["lines"][-1]) == {"event": "qualification_finished", "ok": True}
    text = json.dumps(events)
    assert "host-restore evidence: sglang:hicache_host_hit_tokens_total" in text
    assert "carries r2's config_variant, engine_image, precision" in text
    assert PERCEPTION not in {c.service for c in e.fleet.host.containers()}, "the one-shot is cleaned up"


@pytest.mark.parametrize(
    "fault, evidence",
    [
        ("host-restore-missing", "sglang:hicache_host_hit_tokens_total did not rise across the follow-up"),
        ("labels-wrong", "config_variant: want fc91d24-long-context"),
        # docker/ps lists running containers only (8e07c35): the verdict comes from its output
        ("perception-fails", "qualification_finished: ok=false"),
    ],
)
def test_each_new_gate_fails_on_its_fault_and_rolls_r2_back(e2e_factory, fault, evidence):
    e = e2e_factory(fault)
    final = rollout(e)
    assert final.outcome == "ROLLED_BACK", final.message
    assert evidence in json.dumps(_run_log(e, final.run_id)), f"{fault}: the failing gate's evidence is in the run log"
    run = running(e.fleet)
    assert R2_OLD in run and R2_NEW not in run
    left = {c.service for c in e.fleet.host.containers()}
    assert PERCEPTION not in left and "glm53-soak-relay" not in left
    assert e.fleet.check_invariants() == []
