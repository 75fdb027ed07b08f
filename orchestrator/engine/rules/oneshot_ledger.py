"""Which one-shots earlier runs of a host left removed. docker/ps does not list a finished one-shot,
so its down is always sent unless the run knows it is gone; a `rollback` after a killed rollout is
a new run, so it reads the journal: a one-shot whose last mutating call (over the host's runs from
the rolled-back one on) was a down answered `success` with exit code 0 is gone. An unknown outcome
or a later up leaves it "maybe there".
"""

from __future__ import annotations

from typing import Any


def removed_oneshots(journal: Any, host: str, since_run_id: str, oneshots: set[str]) -> list[str]:
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
