"""A forced recreate (inline `configs:` content, docker/compose#11900) that the dry run does not plan
would leave the old config. The remedy, once per visit: a scoped down of those services through the
Down step, then the dry run again; a second miss fails the gate."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.hosts.parsers.dry_run import DryRunResult
from orchestrator.language.runbook import ComposeSpec, Step

if TYPE_CHECKING:
    from orchestrator.engine.steps.activities import Activities
    from orchestrator.engine.steps.base import Handler
    from orchestrator.engine.steps.outcome import StepOutcome
    from orchestrator.hosts.clients.compose_manager import ComposeRequest
    from orchestrator.language.machine import Node

_TAKES = ("created", "recreated")

#: The id suffix of the remedy's own down (exempt from rollback ownership in compose.down).
CONFIG_DOWN_SUFFIX = "-config-down"


def not_recreated(plan: DryRunResult, req: ComposeRequest) -> list[str]:
    """Forced services the plan neither creates nor recreates (empty for an unforced request)."""
    if not req.force_recreate:
        return []
    return [s for s in req.services if plan.actions.get(s) not in _TAKES]


def remedy_key(node: Node) -> str:
    return f"{node.id}:config-down"


async def stop_for_recreate(rt: Activities, node: Node, step: Step, services: list[str], down_step: Handler) -> StepOutcome:
    """The scoped down of `services` (never an engine) by `down_step`, compose.py's `down`."""
    from orchestrator.engine.steps.outcome import halt

    engines = [s for s in services if rt.rb.replica_of(s)]
    if engines:  # the loader refuses force_recreate on an engine; never stop one for a config
        return halt(f"refusing to stop {', '.join(engines)} for a config recreate: an engine is never stopped for that")
    assert step.dry_run is not None
    down = Step(id=f"{step.id}{CONFIG_DOWN_SUFFIX}", say=f"Stop {', '.join(services)} so that its new config takes",
                down=ComposeSpec(file=step.dry_run.file, services=list(services)))
    rt.emit("note", text=f"{', '.join(services)}: the forced dry run does not recreate it (its new inline config would not "
                         f"take): a scoped down of exactly that, then the dry run again")
    return await down_step(rt, node, down)
