"""A person's signals to a run through the server: approve (by gate name; the run page only the
gate the run waits at now), pause, continue and abort (a run nobody drives is ended here, from
what the host shows: orchestrator/service/orphans.py).

`RunActionsMixin` is a part of the server's `Worker`; it uses the worker's `session`, `runs`,
`log` and `_get_run`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from orchestrator.journal.base import RunRecord
from orchestrator.language.runbook import load_runbook_checked
from orchestrator.teamserver.errors import ApiError
from orchestrator.teamserver.submission import IDENTITY_KEY
from orchestrator.service import signals
from orchestrator.util.exit_codes import ExitCode
from orchestrator.util.user_errors import Refused


class RunActionsMixin:
    """The Worker's approve, pause, continue and abort."""

    def _gates(self, run: RunRecord) -> set[str]:
        """The approval gates of the run's (pinned) runbook; only `*` if it cannot be loaded here."""
        identity = run.context.get(IDENTITY_KEY) or {}
        pinned = identity.get("sha256") if isinstance(identity, dict) else None
        return signals.run_gates(run, lambda: load_runbook_checked(run.runbook, pinned)[0])

    def approve(self, run_id: str, gate: str | None, by: str, now: bool = False, *, at_gate: bool = False) -> dict[str, Any]:
        """`at_gate` (the run page, any browser): approve only the gate the run waits at now, by
        name; `*` and a gate not reached yet are refused (a wildcard once let a click during
        r2's cold start pass r2.soak without stopping)."""
        run = self._get_run(run_id)
        gates = None if run.terminal else self._gates(run)
        if gate is None and not run.terminal:  # no gate named: the one it waits at now (approval_scope.py)
            from orchestrator.engine.rules.approval_scope import waiting_gate

            gate = waiting_gate(run, gates)
        if at_gate and not run.terminal:
            named = sorted(g for g in (gates or ()) if g != "*")
            if gate == "*":
                raise ApiError(400, "approve names the gate the run waits at (one of "
                                    f"{', '.join(named) or 'its approval gates'}), not *", ExitCode.BAD_INPUT)
            if run.state != gate:
                raise Refused(f"run {run.run_id} is at {run.state}, not waiting at {gate[:60]}: nothing was approved")
        signals.approve(self.session.journal, run, gate, by, gates=gates, now=now)
        self.log.info("approved", run_id=run.run_id, gate=gate, by=by)
        return {"run_id": run.run_id, "gate": gate, "approved_by": by}

    def pause(self, run_id: str, by: str) -> dict[str, Any]:
        run = self._get_run(run_id)
        message = signals.pause(self.session.journal, run, by)
        self.log.info("pause_requested", run_id=run.run_id, by=by)
        return {"run_id": run.run_id, "paused_by": by, "message": message}

    def continue_run(self, run_id: str, by: str) -> dict[str, Any]:
        run = self._get_run(run_id)
        message = signals.continue_run(self.session.journal, run, by)
        self.log.info("continue_requested", run_id=run.run_id, by=by)
        return {"run_id": run.run_id, "continued_by": by, "message": message}

    def abort(self, run_id: str, by: str) -> dict[str, Any]:
        run = self._get_run(run_id)
        result = signals.abort(self.session.journal, run, by)
        self.log.info("abort_requested", run_id=run.run_id, by=by)
        mine = self.runs.get(run.run_id)
        if result.runner is None and not (mine is not None and mine.active):
            # nobody drives it: read the host and end it with what is true (orchestrator/service/orphans.py)
            from orchestrator.service.orphans import end_unowned

            ended = asyncio.run(end_unowned(self.session, self.session.journal.get_run(run.run_id), by))
            if ended is not None:
                self.log.warning("orphan_ended", run_id=run.run_id, by=by)
                return {"run_id": run.run_id, "abort_requested": True, "runner": None, "message": ended, "ended": True}
        return {"run_id": run.run_id, "abort_requested": True, "runner": result.runner, "message": result.message}
