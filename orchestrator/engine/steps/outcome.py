"""What a step handler returns: the event it feeds the machine, and a note (importable without the handlers)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from orchestrator.language.machine import Event
from orchestrator.util.durations import format_duration


@dataclass
class StepOutcome:
    event: Event
    note: str = ""
    #: a halt at a step whose call the host refused without acting: `resume --retry` starts again
    #: at this step, not at its phase's first step (which would stop the phase's healthy engine)
    retry_here: bool = False


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


def lock_held(gone_s: float, verb: str, services: Iterable[str], error: str, *, again: bool = False) -> StepOutcome:
    """A compose call compose-manager refused because another operation held its lock past the
    runbook's `timeouts.gone`: it did nothing and says nothing of any replica's health. Failing the
    gate would run the phase's rollback, which stops the healthy engine this phase started (a refused
    stop of the soak relay would cost the host a replica), so the run halts where it stands.
    `again`: the call was a resend (the first one was sent and accepted)."""
    call = f"the {verb} of {', '.join(services)}" + (" sent again" if again else "")
    return StepOutcome(Event.HALT, f"compose-manager's lock stayed held by another operation past "
                                   f"{format_duration(gone_s)} (timeouts.gone): {call} was refused and did nothing ({error})",
                       retry_here=True)
