"""What the simulator did and when, in simulation seconds, taken from inside the simulator.

`SimEvents.attach(fleet)` wraps a few methods of the fleet's `SimHost` instance (never the class,
never the files) so that every event is noted at the exact simulation time the discrete-event
simulation gives it (the host's `_now` while it runs due events):

- `op_finished`: a compose-manager operation (up, dry run, down) ended; with the call's seq
- `started`: a container's process started (for an engine: the start of its cold start)
- `ready`: an engine printed its ready line and became ready
- `exited`: a container's process ended (code != 0 for an engine during its cold start: a failure)
- `registered`: the model-proxy registrar registered the host (a discovery cycle after it started)

The public record (`fleet.calls`: when each request arrived and finished; `fleet.timeline`)
supplies the rest.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SimEvent:
    at: float
    kind: str  # op_finished | started | ready | exited | registered
    name: str  # container name, or the operation ("compose_up", "compose_down")
    detail: dict[str, Any] = field(default_factory=dict)


class SimEvents:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events: list[SimEvent] = []

    def _note(self, host: Any, what: str, name: str, **detail: Any) -> None:
        with self._lock:
            self.events.append(SimEvent(host._now, what, name, detail))

    def snapshot(self) -> list[SimEvent]:
        with self._lock:
            return list(self.events)

    def of(self, kind: str, name: str | None = None) -> list[SimEvent]:
        return [e for e in self.snapshot() if e.kind == kind and (name is None or e.name == name)]

    @classmethod
    def attach(cls, fleet: Any) -> SimEvents:
        """Instrument `fleet.host` (before or after start; events before attaching are not seen)."""
        rec = cls()
        host = fleet.host
        orig_finish, orig_cut = host._finish, host._cut
        orig_start, orig_exit = host._start, host._exit
        orig_step, orig_registered = host._engine_step, host._registrar_registered

        def _finish(op: Any, success: bool, code: int) -> None:
            orig_finish(op, success, code)
            rec._note(host, "op_finished", op.action, seq=op.call.seq if op.call else None,
                      dry_run=op.request.dry_run, services=list(op.request.services), success=success)

        def _cut(op: Any, when: str) -> None:
            orig_cut(op, when)
            rec._note(host, "op_finished", op.action, seq=op.call.seq if op.call else None,
                      dry_run=op.request.dry_run, services=list(op.request.services), success=False, cut=when)

        def _start(c: Any) -> None:
            orig_start(c)
            rec._note(host, "started", c.name, kind=c.kind, file=c.file)

        def _exit(c: Any, code: int) -> None:
            was_stopping = c.stopping
            orig_exit(c, code)
            rec._note(host, "exited", c.name, kind=c.kind, code=code, stopped=was_stopping or c.user_stopped)

        def _engine_step(c: Any, run: int, index: int) -> None:
            was_ready = c.ready
            orig_step(c, run, index)
            if c.ready and not was_ready:
                rec._note(host, "ready", c.name, file=c.file)

        def _registrar_registered(c: Any, run: int) -> None:
            live = c.run == run and c.up
            orig_registered(c, run)
            if live:
                rec._note(host, "registered", c.name)

        host._finish, host._cut = _finish, _cut
        host._start, host._exit = _start, _exit
        host._engine_step, host._registrar_registered = _engine_step, _registrar_registered
        return rec
