"""`manual:` a human's edit, asked for, approved (its state, `*` or `--yes`), then verified by its
`env:` check: an edit approved but not made fails the step, never taken on trust.
"""

from __future__ import annotations

from typing import Any

from orchestrator.engine.steps.base import Activities, Node, Step, StepOutcome, fail, ok, register
from orchestrator.engine.steps.env import env_gate, placeholder_values
from orchestrator.language.gate_specs import ManualSpec, fill
from orchestrator.language.machine import Event


@register("manual")
async def manual(rt: Activities, node: Node, step: Step) -> StepOutcome:
    m = step.spec(ManualSpec)
    edit = fill(m.edit, await placeholder_values(rt, m.edit))  # the instruction as the human must carry it out
    announced = False
    start = rt.start_heartbeat()
    while not ({node.id, "*"} & rt.approvals()):
        if rt.yes:
            rt.approve(node.id, by="--yes")
            break
        if not announced:
            rt.emit("waiting", gate=f"MANUAL EDIT: {edit}; once made, `orchestrate approve {rt.run.run_id} --gate "
                                    f"{node.id}` (then it is verified: {m.verify.env.text()})")
            rt.log.warning("manual_edit_awaited", state=node.id, edit=edit)
            announced = True
        rt.tick(f"manual edit at {node.id}", start, None, lambda: {"awaiting": "approval", "edit": edit})
        await rt.wait()
    verdict = await env_gate(rt, m.verify.env)
    if verdict.event.value != "ok":
        return fail(f"the manual edit was approved but does not hold: {verdict.note} (edit: {edit})")
    return ok(f"manual edit made and verified: {verdict.note}")


def manual_edits_ahead(table: Any, start: str) -> list[str]:
    """The manual edits on the OK path of the rollback entered at `start`, said before it runs."""
    out: list[str] = []
    cur, seen = start, set()
    while cur in table.nodes and cur not in seen:
        node = table.nodes[cur]
        if node.section not in ("rollback", "full_rollback"):
            break
        seen.add(cur)
        if node.step is not None and node.step.manual is not None:
            out.append(f"{cur}: {node.step.manual.edit}")
        nxt = table.edges.get((cur, Event.OK))
        if nxt is None:
            break
        cur = nxt
    return out
