"""The handler type and the registry every step kind is looked up in; what a handler module imports."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from orchestrator.engine.step_descriptions import DESCRIPTIONS, handler_key
from orchestrator.engine.steps.activities import Activities
from orchestrator.engine.steps.outcome import StepOutcome, fail, halt, ok, remedy, retry, skip  # noqa: F401 - the handlers' names
from orchestrator.language.machine import Node
from orchestrator.language.runbook import Step

#: A step kind's handler: its effect and its gate, through the operations of `Activities` (what a
#: handler may do; the executor's Runtime implements it).
Handler = Callable[[Activities, Node, Step], Awaitable[StepOutcome]]

HANDLERS: dict[str, Handler] = {}


def error_text(exc: BaseException) -> str:
    """A client error's detail (the clients' errors carry one), else the exception's name and text."""
    return str(getattr(exc, "detail", "") or f"{type(exc).__name__}: {exc}")


def register(key: str) -> Callable[[Handler], Handler]:
    """Decorator: the handler of step kind `key` in `HANDLERS` (described in step_descriptions.py)."""
    if key in HANDLERS:
        raise ValueError(f"two handlers for {key!r}")
    if key not in DESCRIPTIONS:
        raise ValueError(f"no description for {key!r} in orchestrator/engine/step_descriptions.py")

    def put(handler: Handler) -> Handler:
        HANDLERS[key] = handler
        return handler
    return put


def handler_for(step: Step) -> Handler:
    try:
        return HANDLERS[handler_key(step)]
    except KeyError:
        raise LookupError(f"no handler for step kind {handler_key(step)!r}") from None
