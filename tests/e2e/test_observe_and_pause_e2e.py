"""Issue 24: an observe-only gate (records and notifies, never fails the run) and an operator's
pause honoured at a safe point only, against the simulator."""

from __future__ import annotations

import asyncio
from datetime import UTC

import pytest
import yaml
from recording import RecordingProgress

from orchestrator.engine.executor.pause import safe_points
from orchestrator.language.runbook import DEFAULT_RUNBOOK, RUNBOOK_DIR, load_runbook, parse_runbook

pytestmark = pytest.mark.e2e


def observing(step_id: str):
    """The default runbook with `observe: true` on every step called `step_id`."""
    data = yaml.safe_load((RUNBOOK_DIR / f"{DEFAULT_RUNBOOK}.yaml").read_text())

    def walk(node):
        if isinstance(node, dict):
            if node.get("id") == step_id and "say" in node:
                node["observe"] = True
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(data)
    return parse_runbook(data, source="observe-test")


def test_an_observe_only_gate_records_its_failure_and_the_run_goes_on(e2e_factory):
    from orchestrator.service.admission import new_rollout
    from orchestrator.service.run_info import table_for
    from orchestrator.service.runner import execute

    e = e2e_factory("labels-wrong")  # r2's telemetry-labels gate fails (config_variant)
    run, _, _ = new_rollout(e.session, "gpu02", "v0.0.300", DEFAULT_RUNBOOK)
    rb = observing("telemetry-labels")
    progress = RecordingProgress()
    final = asyncio.run(execute(e.session, run, rb, table_for(run, rb), progress=progress, yes=True, soak=0))
    assert final.outcome == "DONE", final.message  # without observe: ROLLED_BACK (test_rollout_e2e)
    notes = {t.from_state: t.note for t in e.session.journal.transitions(run.run_id)}
    assert notes["r2.telemetry-labels"].startswith("observe-only gate FAILED (the run goes on): ")
    assert "config_variant" in notes["r2.telemetry-labels"]
    observed = [f for k, f in progress.events if k == "observed"]
    assert any(f["state"] == "r2.telemetry-labels" and f["passed"] is False for f in observed), observed
    assert e.fleet.check_invariants() == []


def test_observe_is_refused_on_a_step_a_stop_or_readiness_rests_on():
    for step_id in ("stop-old", "cold-start", "verify", "soak", "apply"):
        with pytest.raises(Exception, match="observe: true is for evidence gates"):
            observing(step_id)


def test_safe_points_never_sit_between_a_down_and_its_replacements_readiness():
    from datetime import datetime

    from orchestrator.journal.base import RunRecord
    from orchestrator.service.run_info import table_for

    now = datetime.now(UTC)
    run = RunRecord("x", "gpu02", DEFAULT_RUNBOOK, "v0.0.300", "rollout", "INIT", False, None, None, {}, now, now, None)
    rb = load_runbook(DEFAULT_RUNBOOK)
    table = table_for(run, rb)
    safe = safe_points(table, rb.engines())
    for sid in ("preflight.read-env", "r2.stop-old", "r2.relay-dry-run", "r2.soak", "r1.stop-old"):
        assert sid in safe, sid
    for sid in ("r2.dry-run", "r2.apply", "r2.cold-start", "r1.dry-run", "r1.apply", "r1.cold-start"):
        assert sid in table.nodes and sid not in safe, sid
    assert not any(table.nodes[s].section in ("rollback", "full_rollback", "remedy") for s in safe)


def test_a_pause_asked_during_a_cold_start_holds_after_readiness_until_continue(e2e_factory):
    from orchestrator.service.admission import new_rollout
    from orchestrator.service.runner import execute

    e = e2e_factory()
    run, rb, table = new_rollout(e.session, "gpu02", "v0.0.300", DEFAULT_RUNBOOK)
    journal = e.session.journal
    seen: list[str] = []

    class Watch(RecordingProgress):
        def event(self, kind, /, **fields):
            super().event(kind, **fields)
            if kind == "step_started":
                seen.append(fields["state"])
                if fields["state"] == "r2.cold-start" and journal.paused(run.run_id) is None:
                    journal.record_audit(run.run_id, "paused", "carol")
            if kind == "paused":
                # held: let it sit a few polls, then continue
                async def later():
                    await e.session.clock.sleep(600)
                    journal.record_audit(run.run_id, "continued", "dave")
                asyncio.get_running_loop().create_task(later())

    progress = Watch()
    final = asyncio.run(execute(e.session, run, rb, table, progress=progress, yes=True, soak=0))
    assert final.outcome == "DONE", final.message
    honoured = [x for x in journal.audit(run.run_id) if x.action == "pause_honoured"]
    assert len(honoured) == 1 and honoured[0].by == "carol"
    # not at r2.apply/cold-start (a replica short): the first safe step after r2's readiness
    assert honoured[0].detail == "r2.relay-dry-run", honoured[0].detail
    assert [x.action for x in journal.audit(run.run_id) if x.action in ("paused", "continued")] == ["paused", "continued"]
    assert e.fleet.check_invariants() == []
