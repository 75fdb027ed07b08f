"""The handler protocol and the registry every step kind is looked up in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.language.machine import Node
from orchestrator.language.runbook import Runbook, Step
from orchestrator.engine.steps.outcome import StepOutcome, fail, halt, ok, remedy, retry, skip  # noqa: F401 - the handlers' names

if TYPE_CHECKING:  # the executor's live services; never imported at run time here
    from orchestrator.engine.executor.runtime import Runtime


@dataclass(frozen=True)
class Description:
    """What `plan` shows for a step: the gate checked after it, and a precondition if any."""

    gate: str
    precondition: str | None = None


class Handler(Protocol):
    key: str

    def describe(self, step: Step, rb: Runbook) -> Description: ...

    async def run(self, rt: "Runtime", node: Node, step: Step) -> StepOutcome: ...


HANDLERS: dict[str, Handler] = {}


def register(handler: Any) -> Any:
    """Class decorator: one instance per step kind in `HANDLERS`."""
    inst = handler()
    if inst.key in HANDLERS:
        raise ValueError(f"two handlers for {inst.key!r}")
    HANDLERS[inst.key] = inst
    return handler


def handler_key(step: Step) -> str:
    return f"check.{step.check}" if step.kind == "check" else step.kind


def handler_for(step: Step) -> Handler:
    try:
        return HANDLERS[handler_key(step)]
    except KeyError:
        raise LookupError(f"no handler for step kind {handler_key(step)!r}") from None
