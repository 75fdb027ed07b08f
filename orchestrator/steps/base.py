"""The handler protocol and the registry every step kind is looked up in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.machine import Event, Node
from orchestrator.runbook import Runbook, Step

if TYPE_CHECKING:  # the executor's live services; never imported at run time here
    from orchestrator.executor.runtime import Runtime


@dataclass
class StepOutcome:
    event: Event
    note: str = ""


def ok(note: str = "") -> StepOutcome:
    return StepOutcome(Event.OK, note)


def fail(note: str) -> StepOutcome:
    return StepOutcome(Event.FAIL, note)


def halt(note: str) -> StepOutcome:
    return StepOutcome(Event.HALT, note)


def retry(note: str) -> StepOutcome:
    return StepOutcome(Event.RETRY, note)


def remedy(note: str) -> StepOutcome:
    return StepOutcome(Event.REMEDY, note)


def skip(note: str) -> StepOutcome:
    return StepOutcome(Event.SKIP, note)


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
