"""The handler protocol and the registry every step kind is looked up in."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.engine.step_descriptions import DESCRIPTIONS, handler_key
from orchestrator.engine.steps.outcome import StepOutcome, fail, halt, ok, remedy, retry, skip  # noqa: F401 - the handlers' names
from orchestrator.language.machine import Node
from orchestrator.language.runbook import Step

if TYPE_CHECKING:  # what a handler may do (the executor's Runtime implements it); never imported at run time here
    from orchestrator.engine.steps.activities import Activities


class Handler(Protocol):
    """A step kind's handler; what `plan` says of its steps is the kind's entry of
    orchestrator/engine/step_descriptions.py (kept apart, so that `plan` does not load handlers)."""

    key: str

    async def run(self, rt: Activities, node: Node, step: Step) -> StepOutcome: ...


HANDLERS: dict[str, Handler] = {}


def error_text(exc: BaseException) -> str:
    """A client error's detail (the clients' errors carry one), else the exception's name and text."""
    return str(getattr(exc, "detail", "") or f"{type(exc).__name__}: {exc}")


def register(handler: Any) -> Any:
    """Class decorator: one instance per step kind in `HANDLERS` (each kind described in
    orchestrator/engine/step_descriptions.py)."""
    inst = handler()
    if inst.key in HANDLERS:
        raise ValueError(f"two handlers for {inst.key!r}")
    if inst.key not in DESCRIPTIONS:
        raise ValueError(f"no description for {inst.key!r} in orchestrator/engine/step_descriptions.py")
    HANDLERS[inst.key] = inst
    return handler


def handler_for(step: Step) -> Handler:
    try:
        return HANDLERS[handler_key(step)]
    except KeyError:
        raise LookupError(f"no handler for step kind {handler_key(step)!r}") from None
