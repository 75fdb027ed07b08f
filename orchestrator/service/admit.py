"""A request admitted into an open session: the run journaled, its lease taken, the options it
runs with. The CLI (`service.runs`) and `orchestrate serve`'s worker both admit through here, and
this goes through orchestrator/service/admission.py (the one admission path) via the runner's
`new_rollout`, `new_rollback`, `retry_run` and `admission.resume_run`."""

from __future__ import annotations

import asyncio
from typing import Any

from orchestrator.journal.base import RunRecord
from orchestrator.service.admission import resume_run
from orchestrator.service.oncall import kept_options
from orchestrator.service.requests import Admitted, ResumeRequest, RollbackRequest, RolloutRequest
from orchestrator.service.runner import new_rollback, new_rollout, place_for_continue, retry_run
from orchestrator.service.signals import parse_soak


def admit_rollout(session: Any, req: RolloutRequest, *, soak_name: str = "--soak",
                  overrides: tuple[str, ...] | None = None) -> Admitted:
    """A new rollout run. `--continue` first places the host (read-only) at the phase its state
    names; admission checks the runbook's prerequisites and journals `req.overrides`."""
    soak = parse_soak(req.soak, soak_name)
    start_phase = asyncio.run(place_for_continue(session, req.host, req.tag, req.runbook)) if req.continue_ else None
    run, rb, table = new_rollout(session, req.host, req.tag, req.runbook, start_phase,
                                 skip_tag_age_check=req.skip_tag_age_check,
                                 overrides=req.overrides if overrides is None else overrides)
    return Admitted(run, rb, table, yes=req.yes, soak=soak, soak_text=req.soak)


def admit_rollback(session: Any, req: RollbackRequest, *, soak_name: str = "--soak") -> Admitted:
    """A new rollback run (its targets validated with dry runs before anything is stopped)."""
    soak = parse_soak(req.soak, soak_name)
    # new_rollback reads the host (async I/O): its own loop (the server calls this in a thread)
    run, rb, table = asyncio.run(new_rollback(session, req.host, req.replica, req.runbook, req.to_tag, req.to_file))
    return Admitted(run, rb, table, yes=req.yes, soak=soak, soak_text=req.soak)


def resume_options(run: RunRecord, req: ResumeRequest, *, soak_name: str = "--soak") -> tuple[bool, str | None, float | None, str]:
    """(yes, soak as given, soak seconds, what was kept): the run's own options unless given again;
    an adoption (no human asked) never keeps `--yes`."""
    yes, soak_text, kept = kept_options(run, yes=req.yes, soak=req.soak)
    if req.adopting:
        yes = False
    return yes, soak_text, parse_soak(soak_text, soak_name), kept


def admit_resume(session: Any, run: RunRecord, req: ResumeRequest, *, checked: Any = None,
                 soak_name: str = "--soak") -> Admitted:
    """`resume`: the run continued under the one admission path (a run superseded by a later
    run of its host is refused); `--retry`: its failed phase again, as a new run.
    `checked`: the runbook the caller verified against the run's pinned identity."""
    yes, soak_text, soak, kept = resume_options(run, req, soak_name=soak_name)
    if req.retry:
        new_run, rb, table = retry_run(session, run)
        return Admitted(new_run, rb, table, yes=yes, soak=soak, soak_text=soak_text, new=True, kept=kept)
    admitted, rb, table = (resume_run(session, run.run_id) if checked is None
                           else resume_run(session, run.run_id, checked))
    session.admitted[run.run_id] = admitted
    return Admitted(admitted.run, rb, table, yes=yes, soak=soak, soak_text=soak_text, new=False, kept=kept)


__all__ = ["admit_rollout", "admit_rollback", "admit_resume", "resume_options"]
