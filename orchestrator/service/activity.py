"""What a run is doing now, for `status` and `runs`: the journal says where a run is, the host's
lease whether anyone moves it. Ended (terminal); interrupted (no live runner holds the lease: it
was released, expired, or its holder is a gone process of this machine, journal/owner.py); paused
(`orchestrate pause`); waiting for approval (at a gate not yet approved; the soak may still be
timing); running. A lease of another machine's process counts as live until it expires.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from orchestrator.journal.base import RunRecord
from orchestrator.journal.owner import describe_owner, holder_gone
from orchestrator.journal.sql import Journal

RUNNING = "running"
PAUSED = "paused"
WAITING = "waiting for approval"
INTERRUPTED = "interrupted"
ENDED = "ended"


@dataclass(frozen=True)
class Activity:
    label: str
    detail: str


def run_activity(run: RunRecord, journal: Journal, table: Any | None = None) -> Activity:
    if run.terminal:
        return Activity(ENDED, f"ended {run.outcome}")
    resume = f"`orchestrate resume {run.run_id}` continues it"
    lease = journal.held_lease(run.host)
    if lease is None or lease.run_id != run.run_id:
        return Activity(INTERRUPTED, f"no runner holds it; {resume}")
    if holder_gone(lease.owner):
        return Activity(INTERRUPTED, f"its runner ({describe_owner(lease.owner)}) is gone; {resume}")
    if lease.expires_at <= datetime.now(UTC):
        return Activity(INTERRUPTED, f"its runner's lease ({describe_owner(lease.owner)}) expired "
                                     f"{lease.expires_at:%Y-%m-%d %H:%M:%S} UTC; {resume}")
    by = f"by {describe_owner(lease.owner)}"
    held = journal.paused(run.run_id)
    if held is not None:
        return Activity(PAUSED, f"{by}, at {run.state}: paused by {held.by} at {held.at:%Y-%m-%d %H:%M:%S} UTC "
                                f"(it holds at its next safe step); `orchestrate continue {run.run_id}` lets it go on")
    if callable(table):  # made only for a run that is running (`runs` loads no runbook for ended runs)
        table = table()
    step = getattr(table.nodes.get(run.state) if table is not None else None, "step", None)
    manual = getattr(step, "manual", None)  # a manual edit awaits its approval
    if (manual is not None or getattr(getattr(step, "soak", None), "approval", False)) \
            and not ({run.state, "*"} & journal.approvals(run.run_id)):
        return Activity(WAITING, f"{by}, at {run.state}: " + (
            f"a human's edit ({manual.edit}), then `orchestrate approve {run.run_id} --gate {run.state}`"
            if manual is not None else f"`orchestrate approve {run.run_id}` ends the gate"))
    return Activity(RUNNING, f"{by}, at {run.state}")


def target_tag(run: RunRecord) -> str | None:
    """The tag the run moves the host to: a rollback's are the previous tags it journaled, not `run.tag`."""
    if run.kind != "rollback":
        return run.tag
    previous = run.context.get("previous") or {}
    tags = sorted({ref.get("tag") for ref in previous.values() if isinstance(ref, dict) and ref.get("tag")})
    return "/".join(tags) if tags else run.tag
