"""Who did what to a run: the journaled audit list, read the same way by every surface.

The list (`journal.audit(run_id)`, journal/sql.py) is the union of the `audit` table (submitted,
resumed, adopted, paused, continued, pause_honoured), the approvals and the abort request, each
with who and when. `summary` turns it into the few lines every surface shows (the API, the run
page, `orchestrate status`, the run's final message): submitter, approvers, aborter, adopter,
pauses.

Names: the server records the token's name (per-operator tokens) or "<client's word> via <addr>";
the CLI records `user@machine` (`cli_actor`), never a process id.
"""

from __future__ import annotations

import contextvars
import getpass
import socket
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import structlog

from orchestrator.journal.base import AuditEntry, RunRecord

if TYPE_CHECKING:
    from orchestrator.journal.sql import Journal


def cli_actor() -> str:
    """The person at this terminal, as the journal names them: `user@machine`."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in this environment
        user = "someone"
    return f"{user}@{socket.gethostname()}"


#: Set by `orchestrate serve` in the task that runs a run: the server journals who submitted,
#: resumed or adopted it itself (with the token's name), so `record_start` adds nothing.
RECORDED_BY_SERVER: contextvars.ContextVar[bool] = contextvars.ContextVar("recorded_by_server", default=False)


def record_start(journal: Journal, run: RunRecord, by: str) -> None:
    """When a runner takes a run (its lease held): journal `by` as its submitter (a run that has
    not taken a step and has none yet) or as who resumed it (the CLI's doors; the server journals
    its own, see RECORDED_BY_SERVER)."""
    if RECORDED_BY_SERVER.get():
        return
    try:
        if journal.transitions(run.run_id):
            journal.record_audit(run.run_id, "resumed", by, "from the command line")
            return
        if any(e.action == "submitted" for e in journal.audit(run.run_id)):
            return
        journal.record_audit(run.run_id, "submitted", by, f"{run.kind} from the command line")
    except Exception as exc:  # noqa: BLE001 - saying who must never stop a run (nor leak its lease)
        structlog.get_logger("orchestrator.audit").warning("audit_not_recorded", run_id=run.run_id,
                                                           error=f"{type(exc).__name__}: {exc}")


def when(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def abort_note(journal: Journal, run_id: str) -> str:
    """The note of an operator's abort: who asked, and when."""
    for e in journal.audit(run_id):
        if e.action == "abort_requested":
            return f"{e.by} asked to abort at {when(e.at)}"
    return "an operator asked to abort"


def summary(items: list[AuditEntry]) -> dict[str, Any]:
    """Who submitted, approved (per gate), aborted, adopted, paused: `{"submitted": {"by", "at"}, ...}`."""
    out: dict[str, Any] = {"submitted": None, "approved": [], "aborted": None, "adopted": [], "paused": None,
                           "resumed": []}
    for e in items:
        line = {"by": e.by, "at": e.at.isoformat(), "detail": e.detail}
        if e.action == "submitted" and out["submitted"] is None:
            out["submitted"] = line
        elif e.action == "approved" and not (e.detail or "").endswith("!now"):
            out["approved"].append({**line, "gate": e.detail})
        elif e.action == "abort_requested":
            out["aborted"] = line
        elif e.action == "adopted":
            out["adopted"].append(line)
        elif e.action == "resumed":
            out["resumed"].append(line)
        elif e.action == "paused":
            out["paused"] = line
        elif e.action == "continued":
            out["paused"] = None
    return out


SAY = {"submitted": "submitted", "resumed": "resumed", "adopted": "adopted", "paused": "asked to pause",
       "continued": "continued", "approved": "approved", "abort_requested": "asked to abort"}


def summary_lines(items: list[AuditEntry]) -> list[str]:
    """`who:` lines for `orchestrate status` and the final message."""
    s = summary(items)

    def by(what: str, line: dict[str, Any]) -> str:
        return f"{what} by {line['by']} at {when(datetime.fromisoformat(line['at']))}"

    out = [by("submitted", s["submitted"])] if s["submitted"] else []
    out += [by("adopted", a) for a in s["adopted"]]
    out += [by(f"{a['gate']} approved", a) for a in s["approved"]]
    if s["aborted"]:
        out.append(by("abort asked", s["aborted"]))
    if s["paused"]:
        out.append(by("paused", s["paused"]) + ": `orchestrate continue` goes on")
    return out
