"""Which one-shots (a perception check) earlier runs of a host left removed.

docker/ps lists running containers only, so a finished one-shot is invisible there and a cleanup
down of it is always sent (`steps/compose.py`) unless the run knows it already removed it
(`RunContext.oneshots_removed`). A run knows that for its own downs; an operator's `rollback`
after a killed rollout is a new run and would send the killed run's last down again
(`compose/down glm53-perception-check` twice in a row). This reads the journal instead:
a one-shot whose last journaled mutating call, over the host's runs from the rolled-back one to
the newest, was a down that compose-manager answered `success` with exit code 0 is gone.
Unknown outcomes (a crash between sending and recording) and any later up leave it "maybe
there": its down is sent, as before.
"""

from __future__ import annotations

from typing import Any


def removed_oneshots(journal: Any, host: str, since_run_id: str, oneshots: set[str]) -> list[str]:
    """The one-shots removed by the last mutating call naming them, in the runs of `host` from
    `since_run_id` (included) to the newest, in the order they ran."""
    if not oneshots:
        return []
    runs = journal.list_runs(host, limit=50)  # newest first
    ids = [r.run_id for r in runs]
    if since_run_id not in ids:
        return []
    removed: list[str] = []
    for run_id in reversed(ids[: ids.index(since_run_id) + 1]):
        for eff in journal.effects(run_id):
            if not eff.mutating:
                continue
            services = ((eff.request or {}).get("request") or {}).get("services") or []
            named = [s for s in services if s in oneshots]
            if not named:
                continue
            out = eff.outcome or {}
            if eff.kind.startswith("compose_down") and out.get("status") == "success" and out.get("exit_code") == 0:
                removed += [s for s in named if s not in removed]
            else:  # an up (sent or maybe sent) or a down of unknown outcome: it may exist
                removed = [s for s in removed if s not in named]
    return removed
