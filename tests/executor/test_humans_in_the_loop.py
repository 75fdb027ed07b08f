"""Humans stay in the loop (issue 21, case 2): a run resumed after Ctrl-C or a crash, or adopted by
a server, waits for a human at every approval gate whatever `--yes` it was started with; only
`--yes` on the very command that runs it now skips them (orchestrator/engine/executor/loop.py: with
`yes = yes or self.ctx.yes` back, these tests fail)."""

from __future__ import annotations

import pytest

from fakes import NEW_R2, R1, RB, TAG, ClockLimit, Rig, ctx_at


def soak_of_a_run_started_with_yes(*, yes_now: bool) -> Rig:
    ctx = ctx_at()
    ctx.yes = True  # the run was started with --yes (journaled in its context)
    rig = Rig(state="r2.soak", ctx=ctx, yes=yes_now)
    rig.compose.run(NEW_R2, file=RB.file, tag=TAG, started=-600.0)
    rig.compose.run(R1)
    return rig


async def test_a_resume_without_yes_waits_at_the_approval_gate_although_yes_was_stored():
    rig = soak_of_a_run_started_with_yes(yes_now=False)
    rig.clock.limit = 4000
    with pytest.raises(ClockLimit):
        await rig.step()
    waiting = [f["gate"] for kind, f in rig.progress.events if kind == "waiting"]
    assert any("orchestrate approve" in g for g in waiting), waiting
    assert rig.journal.approvals(rig.run.run_id) == set()


async def test_yes_on_the_resume_itself_skips_the_approval():
    rig = soak_of_a_run_started_with_yes(yes_now=True)
    rig.clock.limit = 4000
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r1.stop-old"), note
