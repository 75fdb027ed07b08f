"""Pause and continue: an operator holds a run at its next safe point, then lets it go on.

Before each step the runner checks for a journaled pause; at a safe point it journals
`pause_honoured` and polls (lease renewed, an abort honoured) until `continue` is journaled.
Safe points: every preflight state, and every forward state not between a `down` of an engine and
its phase's cold start (`logs`): a run never waits a replica short. Rollback and remedy states never
are (a rollback finishes); a pause asked for elsewhere waits for the next safe one.
"""

from __future__ import annotations

from typing import Any

from orchestrator.language.machine import Table


def _stops_an_engine(step: Any, engines: frozenset[str]) -> bool:
    services = step.down.services
    return services == "selected" or bool(set(services) & engines)  # "selected": assume an engine


def safe_points(table: Table, engines: Any) -> frozenset[str]:
    """The states before which a paused run may stop (a down of a non-engine keeps the capacity)."""
    engines = frozenset(engines)
    safe: set[str] = set()
    open_down: dict[str | None, bool] = {}
    for sid in table.order:
        node = table.nodes[sid]
        if node.section == "preflight":
            safe.add(sid)
            continue
        if node.section != "forward":
            continue
        if not open_down.get(node.phase, False):
            safe.add(sid)
        kind = node.step.kind if node.step is not None else None
        if kind == "down" and _stops_an_engine(node.step, engines):
            open_down[node.phase] = True
        elif kind == "logs" and open_down.get(node.phase, False):
            open_down[node.phase] = False  # its replacement's readiness: safe again after it
    return frozenset(safe)


async def honour_pause(rt: Any, state: str) -> None:
    """Before `state` runs: if a pause is journaled and `state` is a safe point, wait for continue."""
    held = rt.journal.paused(rt.run.run_id)
    if held is None or state not in safe_points(rt.table, rt.rb.engines()):
        return
    rt.journal.record_audit(rt.run.run_id, "pause_honoured", held.by, state)
    rt.emit("paused", state=state, by=held.by, at=held.at.isoformat())
    rt.emit("waiting", gate=f"paused by {held.by} before {state}: `orchestrate continue {rt.run.run_id}` goes on")
    rt.log.info("paused", by=held.by, before=state)
    while rt.journal.paused(rt.run.run_id) is not None:
        await rt.wait()  # honours an abort (the rollback of the current phase)
    rt.emit("continued", state=state)
    rt.log.info("continued", before=state)


def observed(rt: Any, node: Any, outcome: Any) -> Any:
    """An observe-only gate (`observe: true`): a failure becomes OK, kept in the note and announced
    (event `observed`); a pass is noted as such. Any other step's outcome is returned unchanged."""
    from orchestrator.engine.steps import StepOutcome
    from orchestrator.language.machine import Event

    if node.step is None or not node.step.observe:
        return outcome
    if outcome.event == Event.FAIL:  # a HALT (a masked env map, an invalid request) still halts
        note = f"observe-only gate FAILED (the run goes on): {outcome.note}"
        rt.emit("observed", state=node.id, passed=False, note=outcome.note)
        rt.log.warning("observe_only_failed", note=outcome.note)
        return StepOutcome(Event.OK, note)
    if outcome.event == Event.OK:
        rt.emit("observed", state=node.id, passed=True, note=outcome.note)
        return StepOutcome(Event.OK, f"observe-only gate passed: {outcome.note}")
    return outcome
