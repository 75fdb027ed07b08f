"""A `Progress` that stamps every executor event with the real clock and the run's clock.

The executor calls `progress.event(...)` synchronously at the moment it decides, so a
`transition` event's stamp is the time of that transition (the journal write happens just
before it). With the simulator and the orchestrator sharing one clock object, `sim` is directly
comparable with the simulator's own record.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Stamped:
    real: float  # time.monotonic()
    sim: float  # the run clock's monotonic() (simulation seconds)
    kind: str
    fields: dict[str, Any] = field(default_factory=dict)
    cpu: float = 0.0  # time.thread_time() of the thread that emitted it (the executor's)


class TimedProgress:
    def __init__(self, clock: Any, on_event: Callable[[Stamped], None] | None = None) -> None:
        self.clock = clock
        self.events: list[Stamped] = []
        self.on_event = on_event

    def event(self, kind: str, **fields: Any) -> None:
        ev = Stamped(time.monotonic(), self.clock.monotonic(), kind, fields, time.thread_time())
        self.events.append(ev)
        if self.on_event is not None:
            self.on_event(ev)

    def transitions(self) -> list[Stamped]:
        return [e for e in self.events if e.kind == "transition"]

    def transition_from(self, state: str) -> Stamped | None:
        return next((e for e in self.events if e.kind == "transition" and e.fields.get("state") == state), None)

    def step_started(self, state: str) -> Stamped | None:
        return next((e for e in self.events if e.kind == "step_started" and e.fields.get("state") == state), None)
