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
    scored = [(len(mismatches(s, observed)), i, s) for i, s in enumerate(rb.host_states)]
    if not scored:
        return None
    _, _, best = min(scored)
    return best, mismatches(best, observed)


def observed_services(rb: Runbook) -> list[str]:
    out: list[str] = []
    for state in rb.host_states:
        out += [s for s in state.services if s not in out]
    return out


def new_file_services(rb: Runbook) -> list[str]:
    """The services the placement dry run names."""
    out: list[str] = []
    for state in rb.host_states:
        out += [s for s, want in state.services.items() if want in ("new", "previous") and s not in out]
    return out


def describe(observed: Observed) -> str:
    return ", ".join(f"{svc}={what}" for svc, what in observed.items())
