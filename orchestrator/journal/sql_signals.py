"""What people say about a run, journaled: operator signals (abort requests, gate approvals) and the
audit list (who did what). Not fenced: the CLI, operators and servers write these, not only runners."""

from __future__ import annotations

from orchestrator.journal.base import AUDIT_ACTIONS, AuditEntry, JournalError, RunNotFound
from orchestrator.journal.sql_core import SqlCore, _require_text


class SqlSignals(SqlCore):
    """Abort requests, approvals and the audit list of a run."""

    # ---- operator signals (not fenced: they come from the CLI, not from a runner)

    def request_abort(self, run_id: str, by: str) -> None:
        _require_text(by, "by")
        with self._tx(write=True) as tx:
            now = self._now(tx)
            self._run_exists(tx, run_id)
            tx.run(
                "INSERT INTO abort_requests (run_id, requested_by, requested_at) VALUES (?, ?, ?) "
                "ON CONFLICT (run_id) DO NOTHING",
                run_id, by, self._ts_param(now),
            )

    def abort_requested(self, run_id: str) -> bool:
        with self._tx(write=False) as tx:
            row = tx.one(
                "SELECT r.run_id AS run_id, a.run_id AS aborted FROM runs r "
                "LEFT JOIN abort_requests a ON a.run_id = r.run_id WHERE r.run_id = ?",
                run_id,
            )
        if row is None:
            raise RunNotFound(run_id)
        return row["aborted"] is not None

    def approve(self, run_id: str, gate: str, by: str) -> None:
        _require_text(gate, "gate")
        _require_text(by, "by")
        with self._tx(write=True) as tx:
            now = self._now(tx)
            self._run_exists(tx, run_id)
            tx.run(
                "INSERT INTO approvals (run_id, gate, approved_by, approved_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (run_id, gate) DO NOTHING",
                run_id, gate, by, self._ts_param(now),
            )

    def approvals(self, run_id: str) -> set[str]:
        with self._tx(write=False) as tx:
            self._run_exists(tx, run_id)
            rows = tx.all("SELECT gate FROM approvals WHERE run_id = ?", run_id)
        return {r["gate"] for r in rows}

    # ---- who did what (not fenced: operators and servers write these, not only runners)

    def record_audit(self, run_id: str, action: str, by: str, detail: str | None = None) -> AuditEntry:
        """Append one line to the run's audit list (`AUDIT_ACTIONS`): who did what, journaled."""
        if action not in AUDIT_ACTIONS:
            raise JournalError(f"unknown audit action {action!r}")
        _require_text(by, "by")
        with self._tx(write=True) as tx:
            now = self._now(tx)
            self._run_exists(tx, run_id)
            row = tx.one("SELECT MAX(seq) AS seq FROM audit WHERE run_id = ?", run_id)
            seq = int(row["seq"]) + 1 if row and row["seq"] is not None else 1
            tx.run("INSERT INTO audit (run_id, seq, action, actor, at, detail) VALUES (?, ?, ?, ?, ?, ?)",
                   run_id, seq, action, by, self._ts_param(now), detail)
        return AuditEntry(action, by, now, detail)

    def audit(self, run_id: str) -> list[AuditEntry]:
        """The run's audit list, oldest first: its audit rows, approvals and abort request."""
        with self._tx(write=False) as tx:
            self._run_exists(tx, run_id)
            rows = tx.all("SELECT seq, action, actor, at, detail FROM audit WHERE run_id = ? ORDER BY seq", run_id)
            approvals = tx.all("SELECT gate, approved_by, approved_at FROM approvals WHERE run_id = ?", run_id)
            aborts = tx.all("SELECT requested_by, requested_at FROM abort_requests WHERE run_id = ?", run_id)
        out = [AuditEntry(r["action"], r["actor"], self._ts_value(r["at"]), r["detail"]) for r in rows]
        out += [AuditEntry("approved", a["approved_by"], self._ts_value(a["approved_at"]), a["gate"]) for a in approvals]
        out += [AuditEntry("abort_requested", a["requested_by"], self._ts_value(a["requested_at"]), None) for a in aborts]
        out.sort(key=lambda e: e.at)  # stable: audit rows keep their order at one timestamp
        return out

    def paused(self, run_id: str) -> AuditEntry | None:
        """The pause that holds the run now (the latest pause/continue is a pause), or None."""
        with self._tx(write=False) as tx:
            row = tx.one("SELECT action, actor, at, detail FROM audit WHERE run_id = ? AND action IN ('paused', "
                         "'continued') ORDER BY seq DESC LIMIT 1", run_id)
        if row is None or row["action"] != "paused":
            return None
        return AuditEntry(row["action"], row["actor"], self._ts_value(row["at"]), row["detail"])

    def submitters(self, run_ids: list[str]) -> dict[str, AuditEntry]:
        """Who submitted each of `run_ids` (one query, for a runs list)."""
        if not run_ids:
            return {}
        marks = ", ".join("?" for _ in run_ids)
        with self._tx(write=False) as tx:
            rows = tx.all(f"SELECT run_id, actor, at, detail FROM audit WHERE action = 'submitted' "
                          f"AND run_id IN ({marks}) ORDER BY seq", *run_ids)
        out: dict[str, AuditEntry] = {}
        for r in rows:
            out.setdefault(r["run_id"], AuditEntry("submitted", r["actor"], self._ts_value(r["at"]), r["detail"]))
        return out
