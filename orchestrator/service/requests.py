"""What a front end hands the service, and what it gets back (typed; no I/O, nothing heavy)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.journal.base import RunRecord


@dataclass(frozen=True)
class RolloutRequest:
    """`orchestrate rollout HOST --tag TAG` (and `POST /runs {"action": "rollout"}`)."""

    host: str
    tag: str
    runbook: str
    yes: bool = False
    soak: str | None = None
    continue_: bool = False
    skip_tag_age_check: bool = False
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True)
class RollbackRequest:
    """`orchestrate rollback HOST` (and `POST /runs {"action": "rollback"}`)."""

    host: str
    replica: str = "all"
    runbook: str | None = None
    to_tag: str | None = None
    to_file: str | None = None
    yes: bool = False
    soak: str | None = None


@dataclass(frozen=True)
class ResumeRequest:
    """`orchestrate resume RUN_ID [--retry]` (and `POST /runs {"action": "resume"}`, adoption)."""

    run_id: str
    retry: bool = False
    yes: bool = False
    soak: str | None = None
    #: no human asked (the server adopts an orphan): the run's stored `--yes` is not kept
    adopting: bool = False


@dataclass(frozen=True)
class FleetRequest:
    """`orchestrate rollout --hosts H1,H2,... --tag TAG`: each host a normal rollout, one at a time."""

    hosts: tuple[str, ...]
    tag: str
    runbook: str | None = None
    yes: bool = False
    soak: str | None = None
    skip_tag_age_check: bool = False
    overrides: tuple[str, ...] = ()


@dataclass
class Admitted:
    """A request admitted into a session: its run journaled and leased, ready to execute."""

    run: RunRecord
    rb: Any
    table: Any
    yes: bool = False
    soak: float | None = None
    soak_text: str | None = None
    new: bool = True  # a new run (rollout, rollback, retry), not one continued
    lease: Any = None  # the host's lease admission took (`execute` runs under it)
    took_over: Any = None  # the lease that one took over, if any


@dataclass
class RunResult:
    """How a run ended here: its record, the exit code, and whether Ctrl-C stopped it."""

    run: RunRecord
    exit_code: int
    interrupted: bool = False
    stopped_by: str = ""  # `Ctrl-C`, `SIGTERM`
    already_ended: bool = False  # a resume of a finished run: nothing executed


@dataclass
class FleetOutcome:
    """How a fleet run ended: orchestrator.engine.fleet's FleetResult, the exit code."""

    result: Any
    exit_code: int
    runbook: str
    hosts: list[str] = field(default_factory=list)
