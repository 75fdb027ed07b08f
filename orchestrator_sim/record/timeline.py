"""When each engine replica slot served (r1 = GPUs 0-3, r2 = GPUs 4-7), in simulation seconds."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from threading import RLock

SLOTS = ("r1", "r2")


@dataclass(frozen=True)
class SlotChange:
    at: float  # simulation seconds (the sim clock's monotonic time)
    slot: str
    serving: bool
    container: str  # the engine that became ready, or that stopped serving
    reason: str = ""


class ServingTimeline:
    """Transitions of each slot between serving (an engine ready) and not serving.

    Starts with the state at t=0 (`initial`); `changes()` lists what happened after."""

    def __init__(self, initial: dict[str, tuple[bool, str]], sink: Path | None = None) -> None:
        self._lock = RLock()
        self.initial = {slot: initial.get(slot, (False, ""))[0] for slot in SLOTS}
        self._initial_containers = {slot: initial.get(slot, (False, ""))[1] for slot in SLOTS}
        self._state = dict(self.initial)
        self._changes: list[SlotChange] = []
        self._sink = sink

    def record(self, at: float, slot: str, serving: bool, container: str, reason: str = "") -> None:
        with self._lock:
            if self._state.get(slot) == serving:
                return
            self._state[slot] = serving
            change = SlotChange(at=at, slot=slot, serving=serving, container=container, reason=reason)
            self._changes.append(change)
            if self._sink is not None:
                with self._sink.open("a") as f:
                    f.write(json.dumps(asdict(change)) + "\n")

    def changes(self) -> list[SlotChange]:
        with self._lock:
            return list(self._changes)


def intervals_with_no_slot_serving(
    initial: dict[str, bool], changes: list[SlotChange], *, after: float = 0.0, until: float | None = None
) -> list[tuple[float, float | None]]:
    state = dict(initial)
    out: list[tuple[float, float | None]] = []
    start: float | None = None if any(state.values()) else after
    for c in sorted(changes, key=lambda c: c.at):
        if until is not None and c.at > until:
            break
        state[c.slot] = c.serving
        down = not any(state.values())
        if down and start is None:
            start = max(c.at, after)
        elif not down and start is not None:
            if c.at >= after:
                out.append((start, c.at))
            start = None
    if start is not None:
        out.append((start, None))
    return out


def load_timeline(path: Path, initial: dict[str, bool] | None = None) -> list[SlotChange]:
    """The changes a `serve` process wrote to DIR/timeline.jsonl."""
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                out.append(SlotChange(**json.loads(line)))
    return out
