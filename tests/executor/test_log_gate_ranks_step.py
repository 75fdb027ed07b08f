"""Ranks per engine: a cold-start gate counts the ranks of its own engine (its `logs.ranks`, else
with `budget: true` its budget's `ranks_per_replica`), not one `log_gates.ranks` for the whole
runbook, so a TP2 engine and a TP4 engine can both have per-rank milestones.

Mutation list (each guard disabled in the source, the named test seen failing, the source restored):
- steps/logs.py's `LogGate(rt.rb.ranks_of(step.logs), ...)` -> `LogGate(g.ranks, ...)` ->
  test_a_budget_gate_counts_its_budgets_ranks_not_the_runbooks (the gate waits for TP4-TP7: ClockLimit).
"""

from __future__ import annotations

from test_gates import MILESTONES, START, timeline

from fakes import NEW_R2, R1, RB, READY, TAG, Rig, ctx_at


async def test_a_budget_gate_counts_its_budgets_ranks_not_the_runbooks():
    rb = RB.model_copy(update={"log_gates": RB.log_gates.model_copy(update={"ranks": 8})})
    cold = next(st for st in rb.phase("r2").steps if st.logs is not None)
    assert cold.logs is not None and cold.logs.budget and rb.ranks_of(cold.logs) == 4
    rig = Rig(state="r2.cold-start", ctx=ctx_at(), rb=rb)
    rig.compose.run(R1)
    c = rig.compose.run(NEW_R2, file=RB.file, tag=TAG, log=[], started=0.0)
    c.script = timeline(START, *MILESTONES, READY)  # TP0-TP3 only, as a TP4 engine logs them
    [(event, note, _)] = await rig.step()
    assert event == "ok", note
