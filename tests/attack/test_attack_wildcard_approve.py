"""Attack (fixed): `orchestrate approve RUN` (CLI, and `--server`/API without at_gate) defaulted to
gate `*`, journaled once and read by EVERY later soak gate of the run (steps/gates.py: `{node.id,
"*"} & approvals`), also after a Ctrl-C and by a run `serve` adopts.

Now (orchestrator/engine/rules/approval_scope.py): with no gate given the approval is of the gate the run waits
at now, refused with one line (exit 2) when it waits at none; `*` only when named, and a `*` from
before a resume or an adoption is not read after it."""

from __future__ import annotations

import asyncio
from datetime import UTC

import pytest
from waiting import wait_until_async

pytestmark = pytest.mark.e2e


def test_cli_approve_without_a_gate_approves_only_the_gate_the_run_waits_at(e2e_factory):
    from recording import RecordingProgress

    from orchestrator.language.runbook import load_runbook
    from orchestrator.service import signals as commands
    from orchestrator.service.admission import new_rollout
    from orchestrator.service.runner import execute
    from orchestrator.util.exit_codes import ExitCode
    from orchestrator.util.user_errors import Refused, UserError

    e = e2e_factory()
    journal = e.session.journal
    run, rb, table = new_rollout(e.session, "gpu02", "v0.0.300", "gpu02-glm53-w4afp8-long-context")
    gates = commands.run_gates(run, lambda: load_runbook(run.runbook))
    # the operator types `orchestrate approve RUN` before any gate (the CLI's call: no --gate)
    with pytest.raises(UserError) as refused:
        commands.approve(journal, run, None, "bob@laptop", gates)
    assert not isinstance(refused.value, Refused) and refused.value.code == ExitCode.BAD_INPUT
    assert "not at an approval gate" in str(refused.value) and "\n" not in str(refused.value)
    assert journal.approvals(run.run_id) == set()

    progress = RecordingProgress()

    def at(state: str):
        now = journal.get_run(run.run_id)
        assert not now.terminal, f"ended {now.outcome} with no approval at all: {now.message}"
        return now if now.state == state else None

    def heartbeats() -> int:
        return sum(1 for kind, _ in progress.events if kind == "heartbeat")

    async def go():
        task = asyncio.create_task(execute(e.session, run, rb, table, progress=progress, yes=False, soak=0.0))
        try:
            await wait_until_async(lambda: at("r2.soak"), "the run to reach its approval gate")
            # it waits there, two heartbeats of its wait later: the refused approve left nothing that passes it
            arrived = heartbeats()
            await wait_until_async(lambda: heartbeats() >= arrived + 2, "two heartbeats of the wait at r2.soak")
            now = at("r2.soak")
            assert now is not None, journal.get_run(run.run_id).state
            said = commands.approve(journal, now, None, "bob@laptop", gates)  # typed now: the gate it waits at
            assert said == f"approved r2.soak of {run.run_id}"
            return await asyncio.wait_for(task, 120)
        finally:
            task.cancel()

    final = asyncio.run(go())
    assert final.outcome == "DONE", final.message
    assert journal.approvals(run.run_id) == {"r2.soak"}


def test_a_named_wildcard_from_before_a_resume_or_adoption_is_not_read_after_it(e2e_factory):
    import itertools
    from datetime import datetime, timedelta

    from orchestrator.engine.rules.approval_scope import effective
    from orchestrator.journal import SqliteJournal
    from orchestrator.language.runbook import load_runbook
    from orchestrator.service import signals as commands
    from orchestrator.service.admission import new_rollout

    e = e2e_factory()
    run, _, _ = new_rollout(e.session, "gpu02", "v0.0.300", "gpu02-glm53-w4afp8-long-context")
    # the same journal on a clock the test steps: each write one second after the one before
    t0, ticks = datetime.now(UTC), itertools.count(1)
    journal = SqliteJournal(e.session.settings.journal_location(), now=lambda: t0 + timedelta(seconds=next(ticks)))
    gates = commands.run_gates(run, lambda: load_runbook(run.runbook))
    commands.approve(journal, run, "*", "bob@laptop", gates)  # `--gate '*'`, by name
    assert "*" in effective(journal, run.run_id)  # read by the runner it was given to
    journal.record_audit(run.run_id, "adopted", "server s1")  # (or a resume after a Ctrl-C)
    assert "*" not in effective(journal, run.run_id)
    commands.approve(journal, run, "*", "alice", gates, now=True)  # given again, to the adopter
    assert {"*", "*!now"} <= effective(journal, run.run_id)
    journal.record_audit(run.run_id, "resumed", "carol", "from the command line")
    assert not {"*", "*!now"} & effective(journal, run.run_id)
    journal.close()
