"""The journal's records (`RunRecord`, `TransitionRecord`, `EffectRecord`, `Lease`), the errors
every backend raises and the run-id rule. The SQL both backends share (`SqlJournal`, also named
`Journal`: what the executor and the server program against) is in journal/sql.py.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from orchestrator.util.outcome import Outcome

RUN_KINDS = frozenset({"rollout", "rollback"})
OUTCOMES = frozenset(o.value for o in Outcome)

Now = Callable[[], datetime]


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    host: str
    runbook: str
    tag: str | None
    kind: str  # "rollout" | "rollback"
    state: str
    terminal: bool
    outcome: str | None  # DONE / ROLLED_BACK / ABORTED / HALTED, or None while running
    message: str | None
    context: dict
    created_at: datetime
    updated_at: datetime
    parent_run_id: str | None
    #: the journal's admission order (monotonic, assigned in the transaction that created the
    #: run): what "a newer run" means everywhere, never `created_at` (a clock can step back)
    seq: int = 0


@dataclass(frozen=True)
class TransitionRecord:
    run_id: str
    seq: int
    from_state: str
    event: str
    to_state: str
    at: datetime
    note: str | None


@dataclass(frozen=True)
class EffectRecord:
    run_id: str
    effect_id: int
    step: str
    kind: str
    mutating: bool
    request: dict
    intent_at: datetime
    outcome: dict | None  # None: intent recorded, outcome unknown (crash in between)
    outcome_at: datetime | None


#: What the audit list of a run records besides approvals and abort requests (their own tables).
AUDIT_ACTIONS = frozenset({"submitted", "adopted", "resumed", "paused", "continued", "pause_honoured"})


@dataclass(frozen=True)
class AuditEntry:
    """One line of a run's audit list: who (`by`) did what (`action`) when, and about what."""

    action: str  # AUDIT_ACTIONS, or "approved" (detail: the gate) / "abort_requested"
    by: str
    at: datetime
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, "by": self.by, "at": self.at.isoformat(), "detail": self.detail}


@dataclass(frozen=True)
class Lease:
    host: str
    run_id: str
    owner: str
    token: int
    expires_at: datetime


# --------------------------------------------------------------------------- errors


class JournalError(Exception):
    """Anything the journal refuses to do."""


class RunNotFound(JournalError):
    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run {run_id!r} in the journal")
        self.run_id = run_id


class StateConflict(JournalError):
    """A transition whose from_state is not the run's current state, or on a finished run."""


class LeaseHeld(JournalError):
    """Another run/owner holds the host's live lease."""

    def __init__(self, holder: Lease) -> None:
        super().__init__(f"host {holder.host} is leased to run {holder.run_id} "
                         f"(owner {holder.owner}) until {holder.expires_at.isoformat()}")
        self.holder_run_id = holder.run_id
        self.owner = holder.owner
        self.expires_at = holder.expires_at


class TierHeld(JournalError):
    """Another host of a `capacity: fleet` tier holds the tier: its run is live."""

    def __init__(self, tier: str, host: str, run_id: str, owner: str) -> None:
        super().__init__(f"tier {tier} is held by run {run_id} on {host} (owner {owner})")
        self.host = host
        self.run_id = run_id
        self.owner = owner


class LeaseLost(JournalError):
    """heartbeat/release with a lease that was taken over (or released)."""


class Fenced(JournalError):
    """A write with a stale fencing token: the run's host lease belongs to someone else now."""


def _superseded_text(lease: Lease, holder: Lease | None, released: bool) -> str:
    mine = f"run {lease.run_id} (owner {lease.owner}, token {lease.token})"
    if holder is None:
        return f"host {lease.host} has no lease; {mine} does not hold it"
    if holder.token == lease.token and released:
        return f"the lease of {mine} on host {lease.host} was released"
    if holder.token < lease.token:
        return (
            f"{mine} presents a token newer than host {lease.host}'s current token "
            f"{holder.token}; the journal does not know this lease"
        )
    return (
        f"{mine} was taken over on host {lease.host} by run {holder.run_id} "
        f"(owner {holder.owner}, token {holder.token})"
    )


# --------------------------------------------------------------------------- run ids

def make_run_id(host: str, at: datetime | None = None) -> str:
    """`gpu02-20261130T0812-7f3a` (host, UTC minute, 4 random hex digits): sorts by time within a
    host, short enough to type into `orchestrate resume`."""
    at = _utc(at or datetime.now(UTC))
    slug = re.sub(r"[^a-z0-9.]+", "-", host.lower()).strip("-.") or "host"
    return f"{slug}-{at:%Y%m%dT%H%M}-{secrets.token_hex(2)}"


def _utc(dt: datetime) -> datetime:
    if dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)
