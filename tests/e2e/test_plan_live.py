"""`plan --live` against the simulator: the verdict in every host state, and never a mutating call
(judged on the simulator's own record of what it received)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.language.runbook import DEFAULT_RUNBOOK

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
TAG = "v0.0.300"
R1 = "model-sg-glm53-w4afp8-tp4-r1"
OLD_FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-Canary.yaml"


def rollout(e):
    from recording import RecordingProgress

    from orchestrator.service.admission import new_rollout
    from orchestrator.service.runner import execute

    run, rb, table = new_rollout(e.session, "gpu02", TAG, DEFAULT_RUNBOOK)
    return asyncio.run(execute(e.session, run, rb, table, progress=RecordingProgress(), yes=True))


def live(e):
    from orchestrator.previews.live_plan import build_live_plan, render_live_markdown, render_live_text

    mark = max((c.seq for c in e.fleet.calls), default=0)
    lp = asyncio.run(build_live_plan(e.session, "gpu02", TAG, DEFAULT_RUNBOOK))
    calls = [c for c in e.fleet.calls if c.seq > mark]
    return lp, render_live_text(lp), render_live_markdown(lp), calls


def assert_read_only(calls):
    cm = [c for c in calls if c.server == "compose-manager"]
    assert not [c for c in cm if c.is_compose_down], "plan --live sent a compose/down"
    assert not [c for c in cm if c.is_compose_up and not c.dry_run], "plan --live sent an up without dry_run: true"
    ups = [c for c in cm if c.is_compose_up]
    assert ups, "no dry run was sent at all (placement needs one)"
    # a forced recreate's dry run is the likeliest to be made real (docker/compose#14029): never in a preview
    assert not [c for c in ups if (c.body or {}).get("force_recreate")], "plan --live sent a forced dry run"
    # docker/ps read right before and right after every dry run
    seqs = sorted(cm, key=lambda c: c.seq)
    for i, c in enumerate(seqs):
        if c.is_compose_up:
            assert seqs[i - 1].path == "/docker/ps" and seqs[i + 1].path == "/docker/ps", f"dry run {c.seq} not bracketed by docker/ps"


def test_before_the_rollout_it_would_start(e2e_factory):
    e = e2e_factory()
    lp, text, md, calls = live(e)
    assert_read_only(calls)
    assert lp.verdict == "would start" and lp.exit_code == 0, lp.reasons
    assert lp.state == "before" and lp.start_phase == "r2"
    # a forced recreate (inline configs only) is held back from a preview, said in its dry-run list
    assert any(d.purpose == "phase r2 relay-dry-run" and d.status == "not sent" and "forced recreate of glm53-soak-relay" in d.note
               for d in lp.dry_runs), lp.dry_runs
    assert text.rstrip().splitlines()[-1].startswith("verdict: would start")
    # placeholders filled: previous file and tag resolved, the env map's key count
    assert "<previous" not in text and f"{OLD_FILE}" in text and "v0.0.290" in text
    assert f"<env map of gpu02: {len(lp.env_keys)} keys>" in text and "read at run time" not in text
    # keys only, never values
    values = [v for v in e.fleet.dashboard_env.values() if len(v) >= 6]
    assert values and not [v for v in values if v in text or v in md]
    assert "graphistry/GLM-5.3-Flash-W4AFP8: held" in text and "GPU 4: " in text
    assert "<details>" in md and "would start" in md.splitlines()[0]


def test_part_way_after_an_r2_only_run_it_refuses_with_the_continue_command(e2e_factory):
    e = e2e_factory("oom:r1")
    assert rollout(e).outcome == "HALTED"
    lp, text, _, calls = live(e)
    assert_read_only(calls)
    assert lp.verdict == "would refuse" and lp.exit_code == 5
    assert lp.state == "r1-stopped" and lp.start_phase == "r1"
    assert f"orchestrate rollout gpu02 --tag {TAG} --continue" in lp.verdict_line
    # a continue keeps the halted run's rollback targets (not the new file the r2 phase deployed)
    assert lp.previous["model-sg-glm53-fp8-tp4-r2"]["file"] == OLD_FILE and lp.previous_source.startswith("run ")


def test_at_target_after_a_done_rollout_nothing_to_do(e2e_factory):
    e = e2e_factory()
    assert rollout(e).outcome == "DONE"
    lp, text, _, calls = live(e)
    assert_read_only(calls)
    assert lp.verdict == "nothing to do" and lp.exit_code == 0, lp.reasons
    assert lp.state == "at-target"
    assert [d.purpose for d in lp.dry_runs] == ["placement (host_states)"], "nothing to do: only the placement dry run"
    assert text.rstrip().splitlines()[-1].startswith("verdict: nothing to do")


def test_a_dry_run_that_plans_a_removal_is_refused(e2e_factory):
    e = e2e_factory("dry-run-extra-remove")
    lp, text, _, calls = live(e)
    assert_read_only(calls)
    assert lp.verdict == "would refuse" and lp.exit_code == 5
    assert lp.state == "before"
    assert f"removes {R1}" in lp.verdict_line, lp.verdict_line
    # the serving r1 still runs, untouched
    assert any(c.service == R1 and c.state == "running" for c in e.fleet.host.containers())


def test_cli_plan_live_exit_codes_and_markdown(e2e_factory, tmp_path):
    e = e2e_factory("dry-run-extra-remove")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    env.update(e.fleet.env_for_orchestrator(tmp_path / "inventory.yaml"))
    env.update({"ORCHESTRATOR_STATE_DIR": str(tmp_path / "st"), "ORCHESTRATOR_TIME_SCALE": "3000"})
    cmd = [sys.executable, "-m", "orchestrator.cli", "plan", "gpu02", "--tag", TAG, "--live"]
    r = subprocess.run([*cmd, "--format", "markdown"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 5, r.stderr
    assert r.stdout.startswith("**⛔ verdict: would refuse") and "<details>" in r.stdout
    r = subprocess.run([*cmd, "--rollback", "all"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert not [c for c in e.fleet.calls if c.is_mutating]


def test_plan_live_refuses_while_a_run_holds_the_host_and_names_the_diagram_formats_offline(e2e_factory, tmp_path):
    from orchestrator.journal import SqliteJournal

    e = e2e_factory()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    env.update(e.fleet.env_for_orchestrator(tmp_path / "inventory.yaml"))
    env.update({"ORCHESTRATOR_STATE_DIR": str(tmp_path / "st"), "ORCHESTRATOR_TIME_SCALE": "3000"})
    cmd = [sys.executable, "-m", "orchestrator.cli", "plan", "gpu02", "--tag", TAG, "--live"]
    r = subprocess.run([*cmd, "--format", "mermaid"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--live shows text, markdown, json" in r.stderr and "bug" not in r.stderr
    (tmp_path / "st").mkdir()
    j = SqliteJournal(tmp_path / "st" / "journal.sqlite3")
    try:  # a run of another, live machine holds gpu02
        run = j.create_run(host="gpu02", runbook="rb", tag=TAG, kind="rollout", state="r2.apply", context={})
        j.acquire_lease("gpu02", run.run_id, "laptop:4242:x", 600)
    finally:
        j.close()
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 5, r.stdout[-500:] + r.stderr
    assert f"gpu02 is leased by run {run.run_id}" in r.stderr and "plan --live sends dry runs" in r.stderr
    assert not [c for c in e.fleet.calls if c.is_compose_up]  # not one dry run sent
