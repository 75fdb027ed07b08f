"""Request bodies of `orchestrate serve`: every field bounded (cheap to check, short to echo in an
error), unknown fields refused.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from orchestrator.service.signals import MAX_GATE_LEN
from orchestrator.util.durations import MAX_DURATION_S

Host = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
Tag = Annotated[str, Field(min_length=1, max_length=64)]
#: A runbook *name*: resolved in the packaged runbook directory only (runbook.load_runbook_checked).
RunbookName = Annotated[str, Field(min_length=1, max_length=100)]
RunId = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
#: A duration ("30m", "0") or a number of seconds: finite, 0 to 7 days (strict: `true` is not 1 s).
Soak = (Annotated[str, Field(min_length=1, max_length=32)] |
             Annotated[float, Field(ge=0, le=MAX_DURATION_S, allow_inf_nan=False, strict=True)])
#: Who asks, journaled in single-token mode. No control characters (the journal refuses a NUL: a 500).
Who = Annotated[str, Field(max_length=100, pattern=r"^[^\x00-\x1f\x7f]*$")]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RolloutBody(_Body):
    action: Literal["rollout"]
    host: Host
    tag: Tag
    runbook: RunbookName | None = None
    yes: bool = False
    #: Override of every soak.
    soak: Soak | None = None
    by: Who | None = None


class RollbackBody(_Body):
    action: Literal["rollback"]
    host: Host
    replica: Literal["r1", "r2", "all"] = "all"
    to_tag: Tag | None = None
    to_file: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    runbook: RunbookName | None = None
    by: Who | None = None
    #: The flags rollout and resume have (`orchestrate rollback --yes --soak`).
    yes: bool = False
    soak: Soak | None = None


class ResumeBody(_Body):
    action: Literal["resume"]
    run_id: RunId
    retry: bool = False
    yes: bool = False
    soak: Soak | None = None
    by: Who | None = None


class ApproveBody(_Body):
    #: None: the gate the run waits at now (refused when it waits at none); `*` only by name
    gate: Annotated[str, Field(min_length=1, max_length=MAX_GATE_LEN)] | None = None
    #: also end the rest of the soak at once
    now: bool = False
    #: Approve only the gate the run waits at now, by name (the run page; every browser: app.approve_run).
    at_gate: bool = False
    by: Who | None = None


class SignalBody(_Body):
    """abort, pause and continue"""

    by: Who | None = None


SubmitBody = Annotated[RolloutBody | RollbackBody | ResumeBody, Field(discriminator="action")]
SUBMIT = TypeAdapter(SubmitBody)


def validation_message(exc: ValidationError) -> str:
    """One line: the first problem, named by its field (never the value sent)."""
    first = exc.errors()[0]
    loc = [p for p in first["loc"] if not isinstance(p, int)]
    if loc and loc[0] in ("rollout", "rollback", "resume"):
        loc = loc[1:]  # the discriminator's branch, not a field
    loc = [p for p in loc if p not in ("str", "float", "constrained-str", "function-after")]
    where = ".".join(str(p) for p in loc)
    msg = " ".join(str(first["msg"]).split())
    if first["type"] == "union_tag_invalid":
        return "action must be one of rollout, rollback, resume"
    if first["type"] == "union_tag_not_found":
        return "the body needs an action: rollout, rollback or resume"
    if first["type"] == "extra_forbidden":
        return f"unknown field {where[:60]!r}"
    return f"{where}: {msg}" if where else f"the request body: {msg}"
