"""The records of the simulated compose-manager's operations: a request, an operation in flight
(its streamed lines and outcome) and an orphan removal.

Their own module, below both `host/state.py` (which keeps the current operation and the orphan
removals on the host) and `ops.py` (which creates them), so that neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator_sim.record.calls import RecordedCall


@dataclass(frozen=True)
class WorkCopy:
    """The server's copy of one repository file in its work dir (written by an up or dry run)."""

    path: str
    tag: str
    commit: str
    text: str
    sha256: str


@dataclass(frozen=True)
class OrphanRemoval:
    at: float
    container: str
    service: str
    by_file: str
    by_tag: str
    stop_timeout_s: float
    call_seq: int | None


@dataclass
class ComposeRequest:
    tag: str
    file: str
    project: str
    services: list[str]
    env: dict[str, str]
    force_recreate: bool
    dry_run: bool


@dataclass
class Operation:
    action: str  # compose_up | compose_down
    request: ComposeRequest
    call: RecordedCall | None
    lines: list[tuple[str, str]] = field(default_factory=list)  # (event, data)
    done: bool = False
    success: bool = False
    exit_code: int = 0
    cut: bool = False
    effects: list[str] = field(default_factory=list)
    started_at: str = ""
    plan: dict[str, Any] | None = None  # the dry run's `plan` event, sent before `done`
