"""A request run to its end on this machine: the checks a user can fail (before a run exists or a
lease is taken), the session opened, admission (service.admission), the options the run keeps,
execution (stoppable), the lease released and the session closed, the exit code.

The front end gives a `Hooks`: how it shows progress, its first line and where Ctrl-C stopped a
run; it renders the typed result (service.requests). Nothing here prints."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.engine.fleet import Interrupted, default_runbook, refuse_unmet_prerequisites, run_fleet, runbook_for
from orchestrator.engine.rules.prerequisites import check_overrides
from orchestrator.hosts.inventory import load_inventory
from orchestrator.journal.base import RunRecord
from orchestrator.language.runbook import load_runbook
from orchestrator.service import oncall
from orchestrator.service.admission import admit_resume, admit_rollback, admit_rollout
from orchestrator.service.oncall import kept_options, record_options, refuse_placeholder_inventory, rollback_headline
from orchestrator.service.orphans import superseded_by
from orchestrator.service.reads import get_run, load_settings_for
from orchestrator.service.requests import (
    Admitted,
    FleetOutcome,
    FleetRequest,
    ResumeRequest,
    RollbackRequest,
    RolloutRequest,
    RunResult,
)
from orchestrator.service.run_info import check_tag
from orchestrator.service.runner import execute_stoppable
from orchestrator.service.session import Session
from orchestrator.service.signals import parse_soak
from orchestrator.service.startup import ReadSession
from orchestrator.util.exit_codes import INTERRUPTED_EXIT, OUTCOME_EXIT, ExitCode
from orchestrator.util.user_errors import UserError


def _none(*_a: Any) -> None:
    return None


@dataclass
class Hooks:
    """What the front end shows; defaults show nothing."""

    #: a new progress sink for each run (LiveProgress, JsonProgress, a server's ...)
    progress: Callable[[], Any] = lambda: None
    #: (what the command does, the settings): the command's first line
    first_line: Callable[[str, Any], None] = _none
    #: a fleet run starts its host: (host, index from 0, of how many)
    fleet_host: Callable[[str, int, int], None] = _none
    #: a fleet run's host ended (not interrupted)
    host_done: Callable[[RunRecord], None] = _none
    #: Ctrl-C stopped a run at a safe point (its lease released): say where it is
    interrupted: Callable[[RunResult], None] = _none


def exit_code(run: RunRecord) -> int:
    return oncall.exit_code(run.kind, run.outcome)


def _execute(session: Any, adm: Admitted, hooks: Hooks) -> RunResult:
    """Keep the run's options, execute it (the lease released on every way out), the exit code."""
    record_options(adm.run, yes=adm.yes, soak=adm.soak_text)
    final, stopped_by = execute_stoppable(session, adm.run, adm.rb, adm.table, progress=hooks.progress(), yes=adm.yes,
                                          soak=adm.soak)
    if stopped_by is not None:
        result = RunResult(final, INTERRUPTED_EXIT, interrupted=True, stopped_by=stopped_by)
        hooks.interrupted(result)
        return result
    return RunResult(final, exit_code(final))


def rollout(req: RolloutRequest, inventory: Path | None, hooks: Hooks) -> RunResult:
    """`orchestrate rollout HOST`: every check a user can fail comes before a run exists or a lease is taken."""
    check_tag(req.tag)
    parse_soak(req.soak)
    settings = load_settings_for(inventory)
    settings.require_host_tokens("rollout")
    rb = load_runbook(req.runbook)
    if req.overrides:  # a typo never passes: only the runbook's prerequisites can be named
        check_overrides(rb.prerequisites, list(req.overrides))
    refuse_placeholder_inventory(settings, req.host)
    hooks.first_line(f"{req.host}: rollout to {req.tag} (runbook {Path(req.runbook).stem})", settings)
    with closing(Session.open(settings)) as session:
        # admitted with its prerequisites checked and the overrides journaled
        return _execute(session, admit_rollout(session, req), hooks)


def rollback(req: RollbackRequest, inventory: Path | None, hooks: Hooks) -> RunResult:
    """`orchestrate rollback HOST`: its first line names the target, once admission found it."""
    if (req.to_tag is None) != (req.to_file is None):
        raise UserError("--to-tag and --to-file go together")
    if req.to_tag is not None:
        check_tag(req.to_tag)
    parse_soak(req.soak)
    settings = load_settings_for(inventory)
    settings.require_host_tokens("rollback")
    # a runbook named (even an empty name) is read as given; a wrong --replica is refused first
    load_runbook(req.runbook if req.runbook is not None else default_runbook(req.host)).rollback_replicas(req.replica)
    refuse_placeholder_inventory(settings, req.host)
    with closing(Session.open(settings)) as session:
        adm = admit_rollback(session, req)
        hooks.first_line(rollback_headline(adm.run, adm.rb), settings)
        return _execute(session, adm, hooks)


def resume(req: ResumeRequest, inventory: Path | None, hooks: Hooks) -> RunResult:
    """`orchestrate resume RUN_ID [--retry]`: a run that already ended is reported, not run."""
    parse_soak(req.soak)
    settings = load_settings_for(inventory)
    with closing(ReadSession.open(settings)) as reader:
        run = get_run(reader, req.run_id)
    if run.terminal and not req.retry:
        return RunResult(run, exit_code(run), already_ended=True)
    settings.require_host_tokens("resume")
    refuse_placeholder_inventory(settings, run.host)
    load_runbook(run.runbook)
    _, soak_text, kept = kept_options(run, yes=req.yes, soak=req.soak)
    parse_soak(soak_text)
    hooks.first_line(f"{run.run_id}: {'retry' if req.retry else 'resume'} of the {run.kind} of {run.host} at {run.state}; "
                     f"{kept}", settings)
    with closing(Session.open(settings)) as session:
        return _execute(session, admit_resume(session, get_run(session, req.run_id), req), hooks)


def check_fleet_options(tag: str, soak: str | None) -> None:
    """What `rollout --hosts` checks before it reads the host list."""
    check_tag(tag)
    parse_soak(soak)


def fleet(req: FleetRequest, inventory: Path | None, hooks: Hooks) -> FleetOutcome:
    """`rollout --hosts`: orchestrator.engine.fleet's rules; each host a normal rollout run, one at a time."""
    check_fleet_options(req.tag, req.soak)
    hosts = list(req.hosts)
    settings = load_settings_for(inventory)
    settings.require_host_tokens("rollout")
    inv = load_inventory(settings.inventory_path())
    for h in hosts:
        inv.host(h)  # an unknown host is named before any runbook is chosen
    rb = runbook_for(hosts, req.runbook)
    runbook_ref = req.runbook or rb.name
    with closing(Session.open(settings)) as session:
        refuse_unmet_prerequisites(rb, session.journal, req.overrides)
        for h in hosts:
            refuse_placeholder_inventory(settings, h)
        hooks.first_line(f"{', '.join(hosts)}: fleet rollout to {req.tag} (runbook {rb.name})", settings)

        def one(host: str) -> RunRecord:
            one_req = RolloutRequest(host=host, tag=req.tag, runbook=runbook_ref, yes=req.yes, soak=req.soak,
                                     skip_tag_age_check=req.skip_tag_age_check, overrides=req.overrides)
            pending = _own_interrupted_run(session, host, req.tag, rb.name)
            adm = (admit_resume(session, pending, ResumeRequest(run_id=pending.run_id, yes=req.yes, soak=req.soak))
                   if pending is not None else admit_rollout(session, one_req))
            result = _execute(session, adm, hooks)
            if result.interrupted:
                raise Interrupted(host)
            hooks.host_done(result.run)
            return result.run

        result = run_fleet(hosts, one, hooks.fleet_host)
    if result.refused is not None:
        code = int(result.refused[1].code)
    elif result.interrupted is not None:
        code = INTERRUPTED_EXIT
    else:
        code = int(OUTCOME_EXIT.get(result.outcome, ExitCode.UNEXPECTED))
    return FleetOutcome(result, code, runbook_ref, hosts)


def _own_interrupted_run(session: Any, host: str, tag: str, runbook: str) -> RunRecord | None:
    """The fleet command again after a Ctrl-C: the host's unfinished rollout of this tag and
    runbook that changed the host and can still be resumed is continued, not started over by a
    new run (which would send its changes again, e.g. the model-downloader one-shot, and leave
    the first run unfinished). None when there is no such run."""
    for run in session.journal.list_runs(host, limit=50):
        if run.terminal:
            continue
        if (run.kind == "rollout" and run.tag == tag and run.runbook == runbook
                and any(e.mutating for e in session.journal.effects(run.run_id)) and superseded_by(session, run) is None):
            return run
        return None  # the newest unfinished run is another kind of run: admission decides
    return None
