"""The one admission path: every way a run enters (a start, `--continue`, a rollback, `resume`,
`resume --retry`, a fleet step, a server submission, a server adoption, a `--server` resume) is
admitted here, and only here.

Admission is ONE journal transaction (`Journal.atomic()`) that

1. evaluates the checks that read the journal: no other run of the host left a compose call
   whose outcome is unknown (`refuse_unsettled`); a resumed run has not ended and is not
   superseded by a later run that acted on its host (`refuse_stale_resume`, by the journal's
   run sequence, never a clock); plus the door's own checks (the tier busy for a rollback, the
   prerequisites of a rollout, the rollout a rollback undoes still the newest one...);
2. creates the run (a start) or claims it (a resume);
3. takes the host's lease (a lease of a process that is gone, journal/owner.py, is taken over);
4. takes the tier's lease where the runbook has `capacity: fleet`: one run at a time among the
   hosts of the tier, for as long as that run holds its host's lease;
5. journals what the door adds (prerequisite overrides as approvals).

All of it commits, or none of it: a check that passed cannot be acted on later by a run whose
world changed in between (a stalled terminal, a second terminal, a server), because the check is
evaluated again in the transaction that acts. Checks made before admission (reading the host:
placement, dry runs of rollback targets, the peers' pools) are advisory only; what they found is
judged again here against the journal, and the tier lease keeps another run of the tier out of
the window between such a read and the admission.

Admissions are serialised across processes (SQLite's write lock, a PostgreSQL advisory lock).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.engine.fleet import refuse_unmet_prerequisites
from orchestrator.engine.leave_pool import refuse_tier_halted
from orchestrator.journal.base import Lease, LeaseHeld, RunRecord, TierHeld
from orchestrator.journal.owner import describe_owner, holder_gone, owner_text
from orchestrator.language.runbook import load_recorded_runbook
from orchestrator.service import requests, runner  # runner imports this module: its names are read at call time
from orchestrator.service.host_reads import place_for_continue
from orchestrator.service.oncall import kept_options
from orchestrator.service.refusals import last_changing_rollout, leased_refusal, refuse_stale_resume, refuse_unsettled
from orchestrator.service.run_info import table_for
from orchestrator.service.session import RUNBOOK_IDENTITY, RUNBOOK_TEXT
from orchestrator.service.signals import parse_soak
from orchestrator.service.tier_checks import refuse_tier_busy
from orchestrator.util.user_errors import Refused, UserError

if TYPE_CHECKING:  # pragma: no cover
    from orchestrator.language.runbook import Runbook
    from orchestrator.service.session import Session

Check = Callable[[], None]


@dataclass(frozen=True)
class Admitted:
    """A run admitted: journaled (created or claimed), its host's lease (and its tier's) held."""

    run: RunRecord
    lease: Lease
    #: the host lease this admission took over (its holder's process was gone, or it expired)
    took_over: Lease | None = None
    #: the tier this run holds (`capacity: fleet` runbooks), None otherwise
    tier: str | None = None


def tier_of(rb: "Runbook") -> str | None:
    """The tier a run of `rb` holds while it runs: the runbook's hosts, when its capacity is the
    fleet's (a run drains its host and the other hosts of the tier carry the domain)."""
    return f"capacity:{rb.name}" if rb.capacity == "fleet" else None


def admit(session: "Session", *, host: str, rb: "Runbook", checks: Sequence[Check] = (),
          create: dict[str, Any] | None = None, claim: str | None = None,
          after: Callable[[RunRecord], None] | None = None) -> Admitted:
    """The one admission transaction (module docstring). Exactly one of `create` (the keyword
    arguments of `Journal.create_run`, host included) and `claim` (the id of a run to resume).
    `checks` read the journal and raise `Refused`/`UserError`; `after(run)` journals what the
    door adds. Raises `Refused` (exit 5) when anything is not admitted; nothing is written then."""
    if (create is None) == (claim is None):
        raise ValueError("admit: give create or claim")
    journal = session.journal
    tier = tier_of(rb)
    run: RunRecord | None = None
    try:
        with journal.atomic():
            if claim is not None:
                run = journal.get_run(claim)
                if run.host != host:
                    raise UserError(f"run {claim} is a run of {run.host}, not {host}")
                if run.terminal:
                    raise Refused(f"run {run.run_id} already ended {run.outcome}: {run.message or ''}".rstrip(": "))
                refuse_stale_resume(session, run)
            refuse_unsettled(session, host, except_run=claim)
            for check in checks:
                check()
            if create is not None:
                run = journal.create_run(**create)
            assert run is not None
            lease, took_over = journal.acquire_lease(host, run.run_id, owner_text(), session.settings.lease_ttl,
                                                     takeover_if=lambda held: holder_gone(held.owner))
            if tier is not None:
                journal.claim_tier(tier, host, run.run_id, takeover_if=lambda held: holder_gone(held.owner))
            if after is not None:
                after(run)
            run = journal.get_run(run.run_id)
    except LeaseHeld as exc:
        if run is not None and exc.holder_run_id == run.run_id and claim is not None:
            raise Refused(f"{host} is leased by run {run.run_id} until {exc.expires_at:%Y-%m-%d %H:%M:%S} UTC: run "
                          f"{run.run_id} is being run by {describe_owner(exc.owner)}; resume it only once that runner "
                          f"is gone") from None
        what = f"run {claim} was not resumed" if claim is not None else "nothing was started"
        raise Refused(leased_refusal(host, exc.holder_run_id, exc.owner, exc.expires_at, what)) from None
    except TierHeld as exc:
        what = f"run {claim} was not resumed" if claim is not None else "nothing was started"
        raise Refused(f"{exc.host} has run {exc.run_id} in flight ({describe_owner(exc.owner)}): one host of the "
                      f"tier ({', '.join(rb.hosts)}) at a time, so {host} is not taken out of it now; {what}. "
                      f"Let that run end, then try again") from None
    return Admitted(run, lease, took_over, tier)


# --------------------------------------------------------------------------- the doors' checks


def same_newest_changing_rollout(session: "Session", host: str, expected: RunRecord | None) -> Check:
    """A rollback undoes the rollout it read before its (slow) host reads: admitted only if that
    is still the newest rollout of the host that changed anything."""
    def check() -> None:
        now = last_changing_rollout(session, host)
        if (now.run_id if now else None) != (expected.run_id if expected else None):
            raise Refused(f"run {now.run_id if now else '?'} changed {host} while this rollback was being prepared "
                          f"(it read run {expected.run_id if expected else 'none'}): nothing was started; look at "
                          f"`orchestrate runs --host {host}` and run the rollback again")
    return check


def prerequisites_hold(session: "Session", rb: "Runbook", overrides: Iterable[str]) -> Check:
    """A rollout of a runbook with prerequisites: each holds, or is overridden by name."""
    names = list(overrides)
    return lambda: refuse_unmet_prerequisites(rb, session.journal, names)


def tier_not_busy(session: "Session", host: str, rb: "Runbook") -> Check:
    def check() -> None:
        refuse_tier_busy(session, host, rb)
        refuse_tier_halted(session.journal, rb, host)  # a tier host HALTED outside the pool (journal)
    return check


def resume_run(session: "Session", run_id: str, rb: "Runbook | None" = None) -> tuple[Admitted, "Runbook", Any]:
    """`resume RUN` (CLI, server, adoption): the run admitted again, its recorded runbook (or
    `rb`, the caller's checked copy of it) and table."""
    run = session.journal.get_run(run_id)
    if rb is None:
        rb = load_recorded_runbook(run.runbook, run.context.get(RUNBOOK_IDENTITY), run.context.get(RUNBOOK_TEXT))
    table = table_for(run, rb)
    admitted = admit(session, host=run.host, rb=rb, claim=run.run_id)
    return admitted, rb, table


# --------------------------------------------------------------------------- the front ends' requests
# The CLI (`service.runs`) and `orchestrate serve`'s worker both admit a request through these.


def admit_rollout(session: Any, req: requests.RolloutRequest, *, soak_name: str = "--soak",
                  overrides: tuple[str, ...] | None = None) -> requests.Admitted:
    """A new rollout run. `--continue` first places the host (read-only) at the phase its state
    names; admission checks the runbook's prerequisites and journals `req.overrides`."""
    soak = parse_soak(req.soak, soak_name)
    start_phase = asyncio.run(place_for_continue(session, req.host, req.tag, req.runbook)) if req.continue_ else None
    run, rb, table = runner.new_rollout(session, req.host, req.tag, req.runbook, start_phase,
                                        skip_tag_age_check=req.skip_tag_age_check,
                                        overrides=req.overrides if overrides is None else overrides)
    return requests.Admitted(run, rb, table, yes=req.yes, soak=soak, soak_text=req.soak)


def admit_rollback(session: Any, req: requests.RollbackRequest, *, soak_name: str = "--soak") -> requests.Admitted:
    """A new rollback run (its targets validated with dry runs before anything is stopped)."""
    soak = parse_soak(req.soak, soak_name)
    # new_rollback reads the host (async I/O): its own loop (the server calls this in a thread)
    run, rb, table = asyncio.run(runner.new_rollback(session, req.host, req.replica, req.runbook, req.to_tag,
                                                     req.to_file))
    return requests.Admitted(run, rb, table, yes=req.yes, soak=soak, soak_text=req.soak)


def resume_options(run: RunRecord, req: requests.ResumeRequest, *,
                   soak_name: str = "--soak") -> tuple[bool, str | None, float | None, str]:
    """(yes, soak as given, soak seconds, what was kept): the run's own options unless given again;
    an adoption (no human asked) never keeps `--yes`."""
    yes, soak_text, kept = kept_options(run, yes=req.yes, soak=req.soak)
    if req.adopting:
        yes = False
    return yes, soak_text, parse_soak(soak_text, soak_name), kept


def admit_resume(session: Any, run: RunRecord, req: requests.ResumeRequest, *, checked: Any = None,
                 soak_name: str = "--soak") -> requests.Admitted:
    """`resume`: the run continued under the one admission path (a run superseded by a later
    run of its host is refused); `--retry`: its failed phase again, as a new run.
    `checked`: the runbook the caller verified against the run's pinned identity."""
    yes, soak_text, soak, kept = resume_options(run, req, soak_name=soak_name)
    if req.retry:
        new_run, rb, table = runner.retry_run(session, run)
        return requests.Admitted(new_run, rb, table, yes=yes, soak=soak, soak_text=soak_text, new=True, kept=kept)
    admitted, rb, table = resume_run(session, run.run_id, checked)
    session.admitted[run.run_id] = admitted
    return requests.Admitted(admitted.run, rb, table, yes=yes, soak=soak, soak_text=soak_text, new=False, kept=kept)


__all__ = ["Admitted", "admit", "tier_of", "resume_run", "same_newest_changing_rollout", "prerequisites_hold",
           "tier_not_busy", "admit_rollout", "admit_rollback", "admit_resume", "resume_options"]
