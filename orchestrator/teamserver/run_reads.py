"""The server's reads of runs (call them in a worker thread): a run from the journal (a 404 when
there is none), the counts the metrics export, health, the runs list, a run's detail (journal,
audit, lease, and this server's view of it) and the expected remaining time from earlier runs.

`RunReadsMixin` is a part of the server's `Worker`; it uses the worker's `session`, `runs`, `log`
and `redactor`, and keeps the history caches `_history` and `_finished_durations`.
"""

from __future__ import annotations

import collections
import statistics
import time
from typing import Any

from orchestrator.journal import audit
from orchestrator.journal.base import RunNotFound, RunRecord
from orchestrator.teamserver.errors import ApiError
from orchestrator.teamserver.run_state import step_durations
from orchestrator.teamserver.submission import IDENTITY_KEY
from orchestrator.service.run_info import context_summary
from orchestrator.util.exit_codes import ExitCode

#: Earlier runs the expected remaining time is taken from (DONE runs of the same runbook and kind).
HISTORY_RUNS = 5
HISTORY_SCAN = 200
HISTORY_MAX_AGE_S = 30.0


class RunReadsMixin:
    """The Worker's reads of runs."""

    def _get_run(self, run_id: str) -> RunRecord:
        try:
            return self.session.journal.get_run(run_id)
        except RunNotFound:
            raise ApiError(404, f"no run {run_id!r} in the journal", ExitCode.BAD_INPUT) from None

    def run_counts(self) -> dict[str, int]:
        journal = self.session.journal
        census = getattr(journal, "run_census", None)
        if census is not None:
            counts, unfinished = census()
        else:  # a journal without the census query (test doubles)
            counts, unfinished = collections.Counter(), []
            for run in journal.list_runs(limit=1_000_000):
                if run.terminal:
                    counts[run.outcome or "HALTED"] += 1
                else:
                    unfinished.append((run.run_id, run.host))
        counts = collections.Counter(counts)
        leases: dict[str, Any] = {}
        for run_id, host in unfinished:
            if host not in leases:
                leases[host] = journal.current_lease(host)
            lease = leases[host]
            counts["RUNNING" if lease is not None and lease.run_id == run_id else "INTERRUPTED"] += 1
        return dict(counts)

    def healthy(self) -> bool:
        try:
            self.session.journal.list_runs(limit=1)
        except Exception as exc:  # noqa: BLE001 - health answers, it does not raise
            self.log.warning("health_check_failed", error=self.redactor.scrub(f"{type(exc).__name__}: {exc}"))
            return False
        return True

    def list_runs(self, host: str | None, limit: int) -> list[dict[str, Any]]:
        journal = self.session.journal
        runs = journal.list_runs(host=host, limit=limit)
        submitters = journal.submitters([r.run_id for r in runs]) if hasattr(journal, "submitters") else {}
        return [{**context_summary(r), "terminal": r.terminal,
                 "submitted_by": (sub.by if (sub := submitters.get(r.run_id)) is not None else None),
                 "submitted_at": sub.at.isoformat() if sub is not None else None,
                 "worker_status": self.runs[r.run_id].status if r.run_id in self.runs else None} for r in runs]

    def run_detail(self, run_id: str, *, events_after: int = 0) -> dict[str, Any]:
        journal = self.session.journal
        run = self._get_run(run_id)
        lease = journal.current_lease(run.host)
        mine = self.runs.get(run_id)
        items = audit.entries(journal, run_id)
        paused = audit.paused_by(journal, run_id)
        return {
            **context_summary(run),
            "terminal": run.terminal,
            "failure": run.context.get("failure"),
            # name and digest only: the recorded path is the server's own file system
            IDENTITY_KEY: ({k: v for k, v in ident.items() if k in ("name", "sha256")}
                           if isinstance(ident := run.context.get(IDENTITY_KEY), dict) else ident),
            "abort_requested": journal.abort_requested(run_id),
            "audit": [e.to_json() for e in items],
            "who": audit.summary(items),
            "paused": paused.to_json() if paused is not None else None,
            "approvals": sorted(journal.approvals(run_id)),
            "lease": None if lease is None or lease.run_id != run_id else {
                "owner": lease.owner, "token": lease.token, "expires_at": lease.expires_at.isoformat()},
            "transitions": [
                {"seq": t.seq, "from": t.from_state, "event": t.event, "to": t.to_state, "at": t.at.isoformat(),
                 "note": t.note}
                for t in journal.transitions(run_id)
            ],
            "effects": [
                {"effect_id": e.effect_id, "step": e.step, "kind": e.kind, "mutating": e.mutating,
                 "request": e.request, "intent_at": e.intent_at.isoformat(), "outcome": e.outcome,
                 "outcome_at": e.outcome_at.isoformat() if e.outcome_at else None}
                for e in journal.effects(run_id)
            ],
            "worker": mine.view(events_after) if mine is not None else None,
        }

    def history(self, run: RunRecord) -> dict[str, Any]:
        """Median seconds per state over the last `HISTORY_RUNS` DONE runs of the same runbook and
        kind (the run page's expected remaining time): `{"runs": n, "median": {state: s}}`."""
        key = (run.runbook, run.kind)
        hit = self._history.get(key)
        if hit is not None and time.monotonic() - hit[0] < HISTORY_MAX_AGE_S:
            return hit[1]
        journal = self.session.journal
        samples: dict[str, list[float]] = {}
        n = 0
        for r in journal.list_runs(limit=HISTORY_SCAN):
            if n >= HISTORY_RUNS:
                break
            if r.run_id == run.run_id or r.runbook != run.runbook or r.kind != run.kind or r.outcome != "DONE":
                continue
            durations = self._finished_durations.get(r.run_id)
            if durations is None:
                durations = step_durations(r.created_at, journal.transitions(r.run_id))
                self._finished_durations[r.run_id] = durations
            n += 1
            for state, seconds in durations.items():
                samples.setdefault(state, []).append(seconds)
        value = {"runs": n, "median": {k: statistics.median(v) for k, v in samples.items()}}
        self._history[key] = (time.monotonic(), value)
        return value
