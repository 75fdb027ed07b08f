"""What a step handler returns: the event it feeds the machine, and a note (importable without the handlers)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial

from orchestrator.language.machine import Event
from orchestrator.util.durations import format_duration


@dataclass
class StepOutcome:
    event: Event
    note: str = ""
    #: a halt at a step whose call the host refused without acting: `resume --retry` starts again
    #: at this step, not at its phase's first step (which would stop the phase's healthy engine)
    retry_here: bool = False


#: A handler's outcome by its event: `ok()`, `fail(note)`, ... (the note is what the transition journals).
ok = partial(StepOutcome, Event.OK)
fail = partial(StepOutcome, Event.FAIL)
halt = partial(StepOutcome, Event.HALT)
retry = partial(StepOutcome, Event.RETRY)
remedy = partial(StepOutcome, Event.REMEDY)
skip = partial(StepOutcome, Event.SKIP)


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
