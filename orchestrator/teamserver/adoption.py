"""Adoption of orphaned runs (module docstring of orchestrator/teamserver/worker.py): every
`adopt_interval` seconds the server resumes here the unfinished runs whose host lease has expired,
exactly as `POST /runs {"action":"resume"}` does, without their `--yes`; the lease decides which
of two servers wins a run.

`AdoptionMixin` is a part of the server's `Worker`; it uses the worker's `session`, `runs`,
`submit`, `redactor`, `log` and `_closed`.
"""

from __future__ import annotations

import asyncio
import contextlib

from orchestrator.journal import audit
from orchestrator.journal.base import LeaseHeld
from orchestrator.teamserver.errors import ApiError
from orchestrator.teamserver.schemas import ResumeBody
from orchestrator.teamserver.submission import _in_thread, _server_name
from orchestrator.util.user_errors import Refused, UserError


class AdoptionMixin:
    """The Worker's adoption of orphaned runs."""

    async def adopt_loop(self, interval: float) -> None:
        """Until shutdown: adopt orphaned runs every `interval` seconds (errors logged, never fatal)."""
        while not self._closed:
            await asyncio.sleep(interval)
            if self._closed:
                return
            try:
                await self.adopt_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the loop must outlive a journal hiccup
                self.log.warning("adoption_failed", error=self.redactor.scrub(f"{type(exc).__name__}: {exc}"))

    async def adopt_once(self) -> list[str]:
        """Resume here every orphaned run whose lease this server wins; the ids adopted."""
        adopted: list[str] = []
        for run_id in await _in_thread(self.orphans):
            try:
                active = await self.submit(ResumeBody(action="resume", run_id=run_id), adopting=True)
            except (Refused, UserError, ApiError, LeaseHeld) as exc:  # another runner won it, or it ended
                self.log.info("adoption_skipped", run_id=run_id, reason=self.redactor.scrub(str(exc))[:200])
                continue
            active.adopted = True
            with contextlib.suppress(Exception):  # who: this server, for the run's audit list
                await _in_thread(audit.record, self.session.journal, run_id, "adopted", f"server {_server_name()}",
                                 "its lease expired with no runner renewing it")
            self.log.warning("run_adopted", run_id=run_id, host=active.host,
                             detail="its lease expired with no runner renewing it: resumed here from the journal")
            adopted.append(run_id)
        return adopted

    def orphans(self) -> list[str]:
        """Unfinished runs with journaled transitions whose host has no live lease (in a thread)."""
        journal = self.session.journal
        census = getattr(journal, "run_census", None)
        unfinished = census()[1] if census is not None else [(r.run_id, r.host) for r in journal.list_runs(limit=1000)
                                                             if not r.terminal]
        out: list[str] = []
        for run_id, host in unfinished:
            mine = self.runs.get(run_id)
            if mine is not None and (mine.active or mine.status in ("failed", "fenced")):
                continue
            if journal.current_lease(host) is not None:
                continue
            if not journal.transitions(run_id):
                continue
            out.append(run_id)
        return out
