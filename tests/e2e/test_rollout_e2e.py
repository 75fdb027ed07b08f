"""Full rollouts, faults and rollbacks against the simulator, judged on the simulator's own record."""

from __future__ import annotations

import asyncio

import pytest
from recording import RecordingProgress

from orchestrator.language.runbook import DEFAULT_RUNBOOK

pytestmark = pytest.mark.e2e

R1 = "model-sg-glm53-w4afp8-tp4-r1"
R2_NEW = "model-sg-glm53-w4afp8-tp4-r2"
R2_OLD = "model-sg-glm53-fp8-tp4-r2"
NEW_FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"
OLD_FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-Canary.yaml"


def rollout(e, *, tag="v0.0.300", yes=True):
    from orchestrator.service.admission import new_rollout
    from orchestrator.service.runner import execute

    run, rb, table = new_rollout(e.session, "gpu02", tag, DEFAULT_RUNBOOK)
    progress = RecordingProgress()
    final = asyncio.run(execute(e.session, run, rb, table, progress=progress, yes=yes))
    return final


def mutating_calls(fleet):
    return [c for c in fleet.calls if (c.is_compose_up and not (c.body or {}).get("dry_run")) or c.is_compose_down]


def running(fleet):
    return {c.service: c for c in fleet.host.containers() if c.state in ("running", "restarting")}


def test_happy_path_ends_done_with_both_replicas_new(e2e_factory):
    e = e2e_factory(log_lines=None)  # the engines' whole logs are read below (no log rotation)
    final = rollout(e)
    assert final.outcome == "DONE", final.message
    assert e.fleet.check_invariants() == []
    run = running(e.fleet)
    assert R2_OLD not in run
    assert run[R2_NEW].file == NEW_FILE and run[R1].file == NEW_FILE
    for svc in (R1, R2_NEW):
        logs = e.fleet.host.logs(svc)
        for rank in range(4):
            assert any(f"TP{rank}]" in ln and "rank_budget_bytes=108984795136" in ln for ln in logs), (svc, rank)
    # r2 was replaced before r1 was touched
    downs = [c.body["services"] for c in mutating_calls(e.fleet) if c.is_compose_down]
    assert downs.index([R2_OLD]) < downs.index([R1])
    # every compose call carried a non-empty services list; force_recreate only on the services
    # whose only change is inline configs content (docker/compose#11900), never on an engine
    for c in e.fleet.calls:
        if c.is_compose_up or c.is_compose_down:
            assert c.body["services"]
            if c.body.get("force_recreate"):
                assert c.body["services"] in (["glm53-soak-relay"], ["otelcol-contrib"]), c.body["services"]


def test_no_secret_reaches_the_journal_or_the_log(e2e_factory):
    e = e2e_factory()
    final = rollout(e)
    env = e.fleet.dashboard_env
    t = e.fleet.tokens
    secrets = [v for k, v in env.items() if k.endswith("TOKEN")] + [t.compose_manager, t.dashboard, t.model_proxy, t.inference]
    blobs = [(e.state_dir / "journal.sqlite3").read_bytes(), (e.state_dir / "logs" / f"{final.run_id}.jsonl").read_bytes()]
    for s in secrets:
        assert len(s) >= 8
        for blob in blobs:
            assert s.encode() not in blob


@pytest.mark.parametrize(
    "fault, outcome",
    [
        ("budget-80pct", "ABORTED"),
        ("budget-no-fit", "ABORTED"),
        ("tag-too-recent", "ABORTED"),
        ("tag-unknown", "ABORTED"),
        ("peer-missing", "ABORTED"),
        ("completion-fails", "ABORTED"),
        ("oom", "ROLLED_BACK"),
        ("cuda-801", "ROLLED_BACK"),
        ("rank-budget-wrong", "ROLLED_BACK"),
        ("restart-loop", "ROLLED_BACK"),
        ("cold-start-hang", "ROLLED_BACK"),
        ("cache-miss", "ROLLED_BACK"),
        ("host-restore-missing", "ROLLED_BACK"),
        ("labels-wrong", "ROLLED_BACK"),
        ("perception-fails", "ROLLED_BACK"),
        ("dry-run-extra-recreate", "ROLLED_BACK"),
        ("dry-run-extra-remove", "ROLLED_BACK"),
        ("dry-run-not-dry", "HALTED"),
        ("dry-run-recreates", "HALTED"),  # the relay's own dry run (r2) recreates it for real: named, halted
        ("busy-409:3", "DONE"),
        ("server-500:3", "DONE"),
        ("cut-before-effect", "DONE"),
        ("cut-after-effect", "DONE"),
        ("zombie-after-down", "DONE"),
    ],
)
def test_each_fault_ends_in_its_expected_state(e2e_factory, fault, outcome):
    e = e2e_factory(fault)
    final = rollout(e)
    assert final.outcome == outcome, f"{fault}: {final.message}"
    calls = e.fleet.calls
    if outcome == "ABORTED":
        assert mutating_calls(e.fleet) == [], "ABORTED must mean nothing was changed"
    if outcome == "ROLLED_BACK":
        run = running(e.fleet)
        assert R2_OLD in run and run[R2_OLD].file == OLD_FILE, "old r2 restored from the previous file"
        assert R2_NEW not in run
    violations = [v for v in e.fleet.check_invariants() if fault != "dry-run-not-dry" or "dry run" not in v]
    assert violations == [], violations
    # nothing is sent after the run ended
    assert all(c.at <= e.fleet.now() for c in calls)


def test_r1_failure_after_r2_switched_halts_with_r2_serving(e2e_factory):
    e = e2e_factory("oom:r1")
    final = rollout(e)
    assert final.outcome == "HALTED", final.message
    assert "r2 alone" in final.message and "--replica all" in final.message
    run = running(e.fleet)
    assert R2_NEW in run and run[R2_NEW].state == "running" and run[R2_NEW].ready
    assert R1 not in run
    assert e.fleet.host.orphan_removals() == []
    assert e.fleet.check_invariants() == []
