"""What a step handler returns: the event it feeds the machine, and a note (importable without the handlers)."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.language.machine import Event


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
