"""Engine readiness events with their cause, for the schedule explorer.

The serving timeline (record/timeline.py) already means *ready*: a slot serves from an engine's ready
line until that engine is stopped, exits or restarts. It does not say which definition the engine
came from or which compose call stopped it. `attach_engine_log(host)` wraps the host instance's
`_update_slot` (the one place a ready engine becomes ready or stops being ready) and records, per
engine, the file/tag it was created from and the compose operation in progress (if any) when it
stopped serving. New code only: the host's classes are not changed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from threading import RLock
from typing import Any


@dataclass(frozen=True)
class EngineEvent:
    at: float
    slot: str
    container: str
    container_id: str
    file: str
    tag: str
    ready: bool  # True: became ready; False: a ready engine stopped serving
    reason: str  # ready | stopping | exited (N)
    call_seq: int | None  # the compose call whose operation was running (None: no compose operation)
    call_action: str | None  # compose_up | compose_down
    call_file: str | None
    call_services: tuple[str, ...] | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class EngineLog:
    def __init__(self) -> None:
        self._lock = RLock()
        self._events: list[EngineEvent] = []

    def add(self, e: EngineEvent) -> None:
        with self._lock:
            self._events.append(e)

    def events(self) -> list[EngineEvent]:
        with self._lock:
            return list(self._events)


def attach_engine_log(host: Any) -> EngineLog:
    """Record every readiness change of every engine of `host` (a SimHost) from now on."""
    log = EngineLog()
    original = host._update_slot

    def update_slot(slot: str | None, container: str, reason: str) -> None:
        original(slot, container, reason)
        if slot is None:
            return
        c = host._containers.get(container)
        op = getattr(host, "_op", None)
        call = getattr(op, "call", None) if op is not None and not getattr(op, "done", False) else None
        req = getattr(op, "request", None) if call is not None else None
        log.add(EngineEvent(
            at=host._now, slot=slot, container=container,
            container_id=getattr(c, "id", ""), file=getattr(c, "file", ""), tag=getattr(c, "tag", ""),
            ready=reason == "ready", reason=reason,
            call_seq=getattr(call, "seq", None), call_action=getattr(op, "action", None) if call is not None else None,
            call_file=getattr(req, "file", None), call_services=tuple(getattr(req, "services", ()) or ()) if req else None,
        ))

    host._update_slot = update_slot
    return log
