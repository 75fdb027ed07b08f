"""Placing the host in the runbook's host states (pure). Each service runs `absent`, `new` (a dry run
of the new file plans nothing for it), `previous` (that dry run would recreate it) or `other`; a
declared `running` matches `new` and `previous`. The first state that matches wins.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.language.runbook import HostState, Runbook

Observed = Mapping[str, str]


def matches(declared: str, observed: str) -> bool:
    if declared == "running":
        return observed in ("new", "previous", "running")
    return declared == observed


def mismatches(state: HostState, observed: Observed) -> list[str]:
    return [f"{svc}: expected {want}, runs {observed.get(svc, 'absent')}"
            for svc, want in state.services.items() if not matches(want, observed.get(svc, "absent"))]


def place(rb: Runbook, observed: Observed) -> HostState | None:
    return next((state for state in rb.host_states if not mismatches(state, observed)), None)


def nearest(rb: Runbook, observed: Observed) -> tuple[HostState, list[str]] | None:
    best = min(rb.host_states, key=lambda s: len(mismatches(s, observed)), default=None)  # the first of the nearest
    return None if best is None else (best, mismatches(best, observed))


def observed_services(rb: Runbook) -> list[str]:
    return list(dict.fromkeys(s for state in rb.host_states for s in state.services))


def new_file_services(rb: Runbook) -> list[str]:
    """The services the placement dry run names."""
    return list(dict.fromkeys(s for state in rb.host_states for s, want in state.services.items()
                              if want in ("new", "previous")))


def describe(observed: Observed) -> str:
    return ", ".join(f"{svc}={what}" for svc, what in observed.items())
