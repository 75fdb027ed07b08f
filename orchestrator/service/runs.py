"""A request run to its end on this machine: the checks a user can fail (before a run exists or a
lease is taken), admission, execution (stoppable), the exit code. Nothing here prints: the front
end's `Hooks` show progress, its first line and where Ctrl-C stopped a run."""

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
from orchestrator.service import oncall, requests
from orchestrator.service.admission import admit_resume, admit_rollback, admit_rollout
from orchestrator.service.oncall import kept_options, record_options, refuse_placeholder_inventory, rollback_headline
from orchestrator.service.orphans import superseded_by
from orchestrator.service.reads import get_run, load_settings_for
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

    progress: Callable[[], Any] = lambda: None  # a new progress sink for each run
    first_line: Callable[[str, Any], None] = _none  # (what the command does, the settings)
    fleet_host: Callable[[str, int, int], None] = _none  # (host, index from 0, of how many)
    host_done: Callable[[RunRecord], None] = _none
    interrupted: Callable[[requests.RunResult], None] = _none


def _execute(session: Any, adm: requests.Admitted, hooks: Hooks) -> requests.RunResult:
    record_options(adm.run, yes=adm.yes, soak=adm.soak_text)
    final, stopped_by = execute_stoppable(session, adm.run, adm.rb, adm.table, progress=hooks.progress(), yes=adm.yes,
                                          soak=adm.soak)
    if stopped_by is not None:
        result = requests.RunResult(final, INTERRUPTED_EXIT, interrupted=True, stopped_by=stopped_by)
        hooks.interrupted(result)
        return result
    return requests.RunResult(final, oncall.exit_code(final.kind, final.outcome))


def rollout(req: requests.RolloutRequest, inventory: Path | None, hooks: Hooks) -> requests.RunResult:
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
        return _execute(session, admit_rollout(session, req), hooks)


def rollback(req: requests.RollbackRequest, inventory: Path | None, hooks: Hooks) -> requests.RunResult:
    """`orchestrate rollback HOST`: its first line names the target admission found."""
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


def resume(req: requests.ResumeRequest, inventory: Path | None, hooks: Hooks) -> requests.RunResult:
    """`orchestrate resume RUN_ID [--retry]`: a run that already ended is reported, not run."""
    parse_soak(req.soak)
    settings = load_settings_for(inventory)
    with closing(ReadSession.open(settings)) as reader:
        run = get_run(reader, req.run_id)
    if run.terminal and not req.retry:
        return requests.RunResult(run, oncall.exit_code(run.kind, run.outcome), already_ended=True)
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
    check_tag(tag)
    parse_soak(soak)


def fleet(req: requests.FleetRequest, inventory: Path | None, hooks: Hooks) -> requests.FleetOutcome:
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
            pending = _own_interrupted_run(session, host, req.tag, rb.name)
            if pending is not None:
                adm = admit_resume(session, pending, requests.ResumeRequest(pending.run_id, yes=req.yes, soak=req.soak))
            else:
                adm = admit_rollout(session, requests.RolloutRequest(
                    host, req.tag, runbook_ref, yes=req.yes, soak=req.soak, skip_tag_age_check=req.skip_tag_age_check,
                    overrides=req.overrides))
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
    return requests.FleetOutcome(result, code, runbook_ref, hosts)


def _own_interrupted_run(session: Any, host: str, tag: str, runbook: str) -> RunRecord | None:
    """The fleet command again after a Ctrl-C: the host's resumable rollout of this tag and runbook
    that changed the host is continued, not started over (that would send its changes again and
    leave the first run unfinished)."""
    run = next((r for r in session.journal.list_runs(host, limit=50) if not r.terminal), None)
    if (run is not None and run.kind == "rollout" and run.tag == tag and run.runbook == runbook
            and any(e.mutating for e in session.journal.effects(run.run_id)) and superseded_by(session, run) is None):
        return run
    return None  # none, or the newest unfinished run is another kind of run: admission decides
