"""`orchestrate pause`, `orchestrate continue` and who did what in `orchestrate status` (issue 24)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.journal import SqliteJournal
from orchestrator.journal.audit import cli_actor
from orchestrator.util.user_errors import UserError

RUNBOOK = "gpu02-glm53-w4afp8-long-context"


def env(settings):
    return {"ORCHESTRATOR_STATE_DIR": str(settings.state_dir), "ORCHESTRATOR_INVENTORY": str(settings.inventory),
            "ORCHESTRATOR_DATABASE_URL": ""}


def test_pause_continue_and_who_in_status(settings):
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    j = SqliteJournal(settings.journal_location())
    run = j.create_run(host="gpu02", runbook=RUNBOOK, tag="v0.0.300", kind="rollout", state="r2.soak", context={})
    j.record_audit(run.run_id, "submitted", "alice", "rollout via the server x")
    j.approve(run.run_id, "r2.soak", by="bob")
    runner = CliRunner()
    r = runner.invoke(app, ["pause", run.run_id], env=env(settings))
    assert r.exit_code == 0 and "next safe step" in r.stdout, r.output
    r = runner.invoke(app, ["pause", run.run_id], env=env(settings))
    assert isinstance(r.exception, UserError) and "already paused" in str(r.exception)  # main(): one line, exit 2
    r = runner.invoke(app, ["status", run.run_id], env=env(settings))
    assert r.exit_code == 0, r.output
    assert "submitted by alice at " in r.stdout and "r2.soak approved by bob at " in r.stdout
    assert f"paused by {cli_actor()} at " in r.stdout
    r = runner.invoke(app, ["status", run.run_id, "--json"], env=env(settings))
    view = json.loads(r.stdout)
    assert view["who"]["submitted"]["by"] == "alice" and view["who"]["paused"]["by"] == cli_actor()
    r = runner.invoke(app, ["continue", run.run_id], env=env(settings))
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["continue", run.run_id], env=env(settings))
    assert isinstance(r.exception, UserError) and "not paused" in str(r.exception)
    assert [e.action for e in j.audit(run.run_id) if e.action in ("paused", "continued")] == ["paused", "continued"]
    j.close()


def test_a_cli_run_journals_its_submitter_and_a_cli_resume_who_resumed(settings):
    from orchestrator.journal import audit

    settings.state_dir.mkdir(parents=True, exist_ok=True)
    j = SqliteJournal(settings.journal_location())
    fresh = j.create_run(host="gpu02", runbook=RUNBOOK, tag="v0.0.300", kind="rollout", state="INIT", context={})
    audit.record_start(j, fresh, "erin@laptop")
    audit.record_start(j, fresh, "erin@laptop")  # once
    assert [(e.action, e.by) for e in j.audit(fresh.run_id)] == [("submitted", "erin@laptop")]
    lease, _ = j.acquire_lease("gpu02", fresh.run_id, "x:1", 60)
    j.record_transition(lease, fresh.run_id, "INIT", "ok", "r2.stop-old")
    audit.record_start(j, fresh, "frank@laptop")  # a resume
    assert [(e.action, e.by) for e in j.audit(fresh.run_id)][-1] == ("resumed", "frank@laptop")
    token = audit.RECORDED_BY_SERVER.set(True)  # the server journals its own
    try:
        audit.record_start(j, fresh, "server@x")
    finally:
        audit.RECORDED_BY_SERVER.reset(token)
    assert len(j.audit(fresh.run_id)) == 2
    j.close()
