"""What the read-only commands need of a run: the tag rule, the table it follows, its summary."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from orchestrator.language.machine import compile_rollback, compile_rollout
from orchestrator.util.user_errors import UserError

if TYPE_CHECKING:
    from orchestrator.journal.base import RunRecord
    from orchestrator.language.machine import Table
    from orchestrator.language.runbook import Runbook

#: ASCII digits, the whole string (`re.match` with `$` let a trailing newline and other scripts' digits through).
TAG_RE = re.compile(r"v[0-9]+\.[0-9]+\.[0-9]+")


def check_tag(tag: str) -> None:
    if not isinstance(tag, str) or not TAG_RE.fullmatch(tag):
        raise UserError(f"tag {tag!r} is malformed: tags look like v0.0.N (e.g. v0.0.300)")


def table_for(run: RunRecord, rb: Runbook) -> Table:
    """The table a run follows: its rollback's replicas, or its rollout from its start phase."""
    ctx = run.context or {}
    if run.kind == "rollback":
        return compile_rollback(rb, list(ctx.get("replicas") or []) or list(reversed(list(rb.replicas))))
    return compile_rollout(rb, ctx.get("start_phase"))


def context_summary(run: RunRecord) -> dict[str, Any]:
    return {
        "run_id": run.run_id, "host": run.host, "kind": run.kind, "tag": run.tag, "runbook": run.runbook,
        "state": run.state, "outcome": run.outcome, "message": run.message,
        "created_at": run.created_at.isoformat(), "updated_at": run.updated_at.isoformat(),
        "parent_run_id": run.parent_run_id,
    }
