"""Which approval an `approve` names, and which approvals a runner may read.
- With no gate given, the approval is of the gate the run waits at now (none: refused, exit 2).
- A `*` approval counts only for the runner driving the run when it was given: not after a later
  resume or adoption. A `*` given again is journaled as `*#2`, `*#3`, ... (one row per gate).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from orchestrator.util.user_errors import UserError

WILDCARD = "*"


def waiting_gate(run: Any, gates: Collection[str] | None) -> str:
    named = sorted(g for g in (gates or ()) if g != WILDCARD)
    if run.state in named:
        return str(run.state)
    raise UserError(f"run {run.run_id} is at {run.state}, not at an approval gate: nothing was approved. Approve when it "
                    f"waits ({', '.join(named) or 'its approval gates'}), or name a gate with --gate")


def stored_name(journal: Any, run_id: str, gate: str) -> str:
    if gate != WILDCARD:
        return gate
    have = journal.approvals(run_id)
    if WILDCARD not in have:
        return WILDCARD
    n = 2
    while f"{WILDCARD}#{n}" in have:
        n += 1
    return f"{WILDCARD}#{n}"


def _wild(name: str) -> bool:
    return name.split("!", 1)[0].split("#", 1)[0] == WILDCARD


def effective(journal: Any, run_id: str) -> set[str]:
    raw = set(journal.approvals(run_id))
    if not any(_wild(g) for g in raw):
        return raw
    items = journal.audit(run_id)  # the audit list (orchestrator/journal/audit.py), approvals included
    since = max((e.at for e in items if e.action in ("resumed", "adopted")), default=None)
    fresh = {e.detail for e in items if e.action == "approved" and e.detail and _wild(e.detail)
             and (since is None or e.at > since)}
    return {g for g in raw if not _wild(g)} | {WILDCARD + ("!now" if g.endswith("!now") else "") for g in fresh}
