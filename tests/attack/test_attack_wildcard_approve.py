"""Attack: `orchestrate approve RUN` (CLI, and `--server`/API without at_gate) defaults to gate
`*`, journaled once and read by EVERY later soak gate of the run (steps/gates.py: `{node.id, "*"}
& approvals`), also after a Ctrl-C and by a run `serve` adopts. Case 3 was closed for the page
only: typed during r2's cold start (or to approve r2.soak), it passes r2.soak AND r1.soak, and
an adopted run that "waits for a human at every approval gate" does not wait."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = pytest.mark.e2e


def test_cli_approve_default_wildcard_passes_every_later_gate_without_stopping(e2e_factory):
    from orchestrator import commands
    from orchestrator.progress import RecordingProgress
    from orchestrator.runbook import load_runbook
    from orchestrator.runner import execute, new_rollout

    e = e2e_factory()
    run, rb, table = new_rollout(e.session, "gpu02", "v0.0.300", "gpu02-glm53-w4afp8-long-context")
    # the operator types `orchestrate approve RUN` while r2 is still cold-starting (exactly the CLI's call)
    commands.approve(e.session.journal, run, "*", "bob@laptop",
                     commands.run_gates(run, lambda: load_runbook(run.runbook)))

    async def go():
        task = asyncio.create_task(execute(e.session, run, rb, table, progress=RecordingProgress(), yes=False,
                                           soak=0.0))
        done, _ = await asyncio.wait({task}, timeout=60)
        if not done:  # waiting at an approval gate: what the promise wants
            task.cancel()
            return None
        return task.result()

    final = asyncio.run(go())
    assert final is None or final.outcome != "DONE", (
        "one `approve` typed before any soak passed every approval gate of the run: " + (final.message or ""))
