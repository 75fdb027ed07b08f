"""What the read-only commands ask of the journal: a run by id, and a run's view. Light: no runner,
no client, no runbook unless a running run needs one to tell an approval wait."""

from __future__ import annotations

from typing import Any

from orchestrator.journal.base import RunNotFound
from orchestrator.language.runbook import load_runbook
from orchestrator.service.activity import run_activity, target_tag
from orchestrator.service.run_info import context_summary, table_for
from orchestrator.util.settings import load_settings
from orchestrator.util.user_errors import UserError


def load_settings_for(inventory: Any) -> Any:
    return load_settings().with_inventory(inventory)


def get_run(session: Any, run_id: str) -> Any:
    try:
        return session.journal.get_run(run_id)
    except RunNotFound:
        raise UserError(f"no run {run_id!r} in {session.settings.journal_location()}: `orchestrate runs` lists them") from None


def run_view(session: Any, run: Any, tables: dict) -> dict[str, Any]:
    """The run's summary plus what `status`/`runs` print: its activity and its target tag."""
    key = (run.runbook, run.kind, tuple(run.context.get("replicas", ())))

    def table() -> Any:  # loaded only for a running run (approval detection): ended runs need no runbook
        if key not in tables:
            try:
                tables[key] = table_for(run, load_runbook(run.runbook))
            except (UserError, ValueError):  # a runbook since removed: no approval detection
                tables[key] = None
        return tables[key]
    act = run_activity(run, session.journal, table)
    return {**context_summary(run), "target_tag": target_tag(run), "activity": act.label, "activity_detail": act.detail}
