"""Faults the simulator can inject, by name.

A fault spec is `name`, `name:arg`, `name@host` or `name:arg@host`. Engine faults take a replica
(`r1` or `r2`, default `r2`): they hit the NEW engine of that replica, i.e. a container of that
replica's slot created from the host's rollout target file (gpu02: the long-context file; a base
host: the W4AFP8 base-tier file); the previous engines are never affected, so a rollback always
works. `busy-409` and `server-500` take a count (default 1). `down-busy` takes a replica and a
count (`down-busy:r1:6`, default 6: one compose/down, the client's five busy retries spent).

Which hosts a fault hits (a fleet may simulate gpu02 and the base hosts gpu03, gpu04, gpu23):
- `@gpuNN` limits the fault to that host, e.g. `no-rejoin@gpu04`, `dist-store-error:r1@gpu03`;
- without `@`, a base-tier fault (scope `base`: dist-store-error, drain-stuck, downloader-fails,
  no-rejoin, host-unhealthy) hits every base host and never gpu02; every other fault hits every
  simulated host, so gpu02's specs (`oom:r2`, `busy-409:2`, ...) mean what they always meant.
- a one-shot or counted fault without `@` is spent once for the whole fleet; with `@`, on its host.

FAULTS (table.py, re-exported here) is the table of record: for each fault, what the simulator
does (the symptom an orchestrator can observe) and the end state a correct orchestrator reaches.
This module parses fault specs and holds the faults active on a host (`ActiveFaults`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from threading import RLock

from orchestrator_sim.faults.table import ENGINE_FAULTS, ENGINE_REPLICAS, FAULTS, FaultInfo

__all__ = ["DOWN_BUSY_DEFAULT", "LOCK_AFTER_DOWN_HOLD_S", "ENGINE_FAULTS", "ENGINE_REPLICAS", "FAULTS", "ActiveFaults", "FaultInfo", "FaultSpec", "parse_fault"]

#: `down-busy` without a count: one compose/down refused through the client's five busy retries
DOWN_BUSY_DEFAULT = 6
#: `lock-after-down` without a count: how many lock calls another client's operation refuses after
#: each down (two compose calls' worth of the client's 1 + 5 busy attempts)
LOCK_AFTER_DOWN_DEFAULT = 12
#: ... and for at most this many simulated seconds (another client's dry run), whatever is left of
#: the count: well inside every runbook's `timeouts.gone`, however slowly the calls come
LOCK_AFTER_DOWN_HOLD_S = 120.0
#: `sidecar-down-busy`: how long the lock stays held from its first refusal (past every runbook's
#: `timeouts.gone` of 10 minutes, and inside the next run's own wait)
SIDECAR_DOWN_BUSY_S = 900.0


@dataclass(frozen=True)
class FaultSpec:
    name: str
    replica: str | None = None
    count: int | None = None
    host: str | None = None  # `@gpuNN`: only that host

    def __str__(self) -> str:
        at = f"@{self.host}" if self.host else ""
        if self.replica and self.count is not None:
            return f"{self.name}:{self.replica}:{self.count}{at}"
        if self.replica:
            return f"{self.name}:{self.replica}{at}"
        if self.count is not None:
            return f"{self.name}:{self.count}{at}"
        return self.name + at


def parse_fault(spec: str) -> FaultSpec:
    head, sep, host = spec.strip().partition("@")
    if sep and not host:
        raise ValueError(f"fault {spec!r}: a host must follow '@'")
    parsed = _parse_fault(head)
    return FaultSpec(parsed.name, parsed.replica, parsed.count, host or None)


def _parse_fault(spec: str) -> FaultSpec:
    name, _, arg = spec.strip().partition(":")
    info = FAULTS.get(name)
    if info is None:
        raise ValueError(f"unknown fault {name!r}; known: {', '.join(sorted(FAULTS))}")
    if info.arg == "replica":
        replica = arg or "r2"
        if replica not in ENGINE_REPLICAS:
            raise ValueError(f"fault {name}: replica must be r1 or r2, not {arg!r}")
        return FaultSpec(name, replica=replica)
    if info.arg == "replica-count":
        replica, _, n = arg.partition(":")
        replica = replica or "r2"
        if replica not in ENGINE_REPLICAS:
            raise ValueError(f"fault {name}: replica must be r1 or r2, not {replica!r}")
        try:
            count = int(n) if n else DOWN_BUSY_DEFAULT
        except ValueError:
            raise ValueError(f"fault {name}: count must be an integer, not {n!r}") from None
        if count < 0:
            raise ValueError(f"fault {name}: count must not be negative")
        return FaultSpec(name, replica=replica, count=count)
    if info.arg == "count":
        try:
            count = int(arg) if arg else LOCK_AFTER_DOWN_DEFAULT if name == "lock-after-down" else 1
        except ValueError:
            raise ValueError(f"fault {name}: count must be an integer, not {arg!r}") from None
        if count < 0:
            raise ValueError(f"fault {name}: count must not be negative")
        return FaultSpec(name, count=count)
    if arg:
        raise ValueError(f"fault {name} takes no argument")
    return FaultSpec(name)


class ActiveFaults:
    """The faults of one simulation, with their remaining counts (thread-safe).

    The fleet holds the whole set; each simulated host works from `for_host(name, base=...)`, a
    view that sees only the specs hitting that host and shares the counts and one-shot marks (a
    spec without `@host` is spent once for the fleet)."""

    def __init__(self, specs: Iterable[str | FaultSpec] = ()) -> None:
        self._lock = RLock()
        self.specs: tuple[FaultSpec, ...] = tuple(s if isinstance(s, FaultSpec) else parse_fault(s) for s in specs)
        self._remaining: dict[FaultSpec, int] = {}
        self._used: set[FaultSpec] = set()
        for s in self.specs:
            if s.count is not None:
                self._remaining[s] = self._remaining.get(s, 0) + s.count

    def for_host(self, host: str, *, base: bool) -> ActiveFaults:
        """The faults hitting `host` (a base-tier host if `base`): see the module's rules."""
        view = ActiveFaults()
        view._lock, view._remaining, view._used = self._lock, self._remaining, self._used
        view.specs = tuple(
            s
            for s in self.specs
            if (s.host is None or s.host == host) and (base or FAULTS[s.name].scope != "base")
        )
        return view

    def active(self, name: str, host: str | None = None) -> bool:
        """Is `name` active (for `host` if given: a spec without `@` or with `@host`)?"""
        return any(s.name == name and (host is None or s.host in (None, host)) for s in self.specs)

    def engine_fault(self, slot: str | None) -> str | None:
        """The engine fault hitting a new (target-file) engine of this slot, if any."""
        for s in self.specs:
            if s.name in ENGINE_FAULTS and s.replica == slot:
                return s.name
        return None

    def take(self, name: str) -> bool:
        """Use one unit of a counted fault; False once it is spent (or not active)."""
        with self._lock:
            for s in self.specs:
                if s.name == name and self._remaining.get(s, 0) > 0:
                    self._remaining[s] -= 1
                    return True
            return False

    def take_for(self, name: str, replicas: Iterable[str]) -> bool:
        """Use one unit of a counted per-replica fault aimed at one of `replicas`; False once spent."""
        wanted = set(replicas)
        with self._lock:
            for s in self.specs:
                if s.name == name and s.replica in wanted and self._remaining.get(s, 0) > 0:
                    self._remaining[s] -= 1
                    return True
            return False

    def count_of(self, name: str) -> int:
        """The count given to an active fault (0: not active); asking does not spend it."""
        return next((s.count or 0 for s in self.specs if s.name == name), 0)

    def take_once(self, name: str) -> bool:
        """True the first time a one-shot fault is asked for, then never again."""
        with self._lock:
            for s in self.specs:
                if s.name == name and s not in self._used:
                    self._used.add(s)
                    return True
            return False

    def __repr__(self) -> str:
        return f"ActiveFaults({', '.join(str(s) for s in self.specs)})"
