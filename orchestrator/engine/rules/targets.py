"""Rollback targets: the previous *successful* deploy of each service, shared by preflight, `plan
--live` and `rollback`. An action-log entry is only an attempt (logged whatever the outcome);
success comes from compose-manager's record (`/version`) or an up our journal saw succeed.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from orchestrator.hosts.parsers.action_log import Action
from orchestrator.language.runbook import Runbook

#: A rollback's journaled `previous_source` for an explicit target, beside a journaled rollout and without.
EXPLICIT_BESIDE_JOURNAL = "--to-tag/--to-file"
EXPLICIT = "the operator's explicit --to-tag/--to-file (no journaled rollout)"


def explicit_target(source: str) -> bool:
    return source in (EXPLICIT_BESIDE_JOURNAL, EXPLICIT)


def rollback_command(host: str, runbook: str, tag: str, file: str, replica: str | None = None) -> str:
    """The rollback of `host` to an explicit target, as a command that works from any machine."""
    scope = f" --replica {replica}" if replica else ""
    return f"orchestrate rollback {host} --runbook {runbook}{scope} --to-tag {tag} --to-file {file}"


def recorded_successes(project_versions: Any) -> set[tuple[str, str]]:
    """(tag, file) of compose-manager's success record (`version().project(p)`; None: none)."""
    recs = (getattr(project_versions, "current", None), getattr(project_versions, "previous", None))
    return {(rec.tag, rec.file) for rec in recs if rec is not None and rec.tag and rec.file}


def journaled_successes(journal: Any, host: str, *, limit: int = 200) -> set[tuple[str, str]]:
    """(tag, file) of every `compose/up` the journal saw succeed on `host`."""
    out: set[tuple[str, str]] = set()
    for run in journal.list_runs(host, limit=limit):
        for eff in journal.effects(run.run_id):
            if eff.kind == "compose_up" and eff.outcome and eff.outcome.get("status") == "success":
                req = eff.request.get("request", {})
                if req.get("tag") and req.get("file"):
                    out.add((req["tag"], req["file"]))
    return out


def newest_successful(actions: Sequence[Action], service: str, succeeded: Iterable[tuple[str, str]]) -> Action | None:
    """The newest `compose_up` in the action log that named `service` and whose (tag, file) succeeded."""
    ok = set(succeeded)
    for act in reversed(actions):
        if act.action != "compose_up" or not act.tag or not act.file:
            continue
        if act.services and service not in act.services:
            continue
        if (act.tag, act.file) in ok:
            return act
    return None


def group_targets(rb: Runbook, previous: Mapping[str, Mapping[str, str]]) -> dict[tuple[str, str], list[str]]:
    """(tag, file) -> the services a rollback brings back from it (each distinct target once)."""
    targets: dict[tuple[str, str], list[str]] = {}
    for svc in rb.previous_refs():
        p = previous.get(svc)
        if p:
            targets.setdefault((p["tag"], p["file"]), []).append(svc)
    return targets


def wrong_target(rb: Runbook, replicas: Iterable[str], previous: Mapping[str, Mapping[str, str]],
                 target: tuple[str, str], removed: Collection[str]) -> str | None:
    """Why a rollback cannot go back to `target` (tag, file), from its dry run before anything stops.
    `removed`: the running services that dry run would remove (the file does not define them): the
    rollback must stop each before its first step from that file, and start only what it defines."""
    wanted = set(replicas)
    stopped: set[str] = set()
    before_first: set[str] | None = None
    starts: list[str] = []
    for ph in rb.full_rollback:
        if ph.replica not in wanted:
            continue
        for st in ph.steps:
            spec = st.compose
            if spec is None or not isinstance(spec.services, list):
                continue
            if st.down is not None:
                stopped.update(spec.services)
                continue
            ref = previous.get(spec.file.split(":", 1)[1]) if spec.file.startswith("previous:") else None
            if ref is None or (ref.get("tag"), ref.get("file")) != target:
                continue
            if before_first is None:
                before_first = set(stopped)
            starts += [s for s in spec.services if s not in starts]
    gone = set(removed)
    undefined = [s for s in starts if s in gone]
    serving = sorted(gone - (before_first or set()) - set(undefined))
    tag, file = target
    why: list[str] = []
    if undefined:
        why.append(f"the file does not define {', '.join(undefined)}, which the rollback starts from it")
    if serving:
        why.append(f"its dry run plans to remove {', '.join(serving)}, running, which the rollback does not stop "
                   f"before it goes back to that file (compose-manager's --remove-orphans would stop "
                   f"{'them' if len(serving) > 1 else 'it'} with a 10 s stop)")
    if not why:
        return None
    return f"rollback target {file}@{tag} is wrong: " + "; ".join(why) + ". Check --to-tag/--to-file. Nothing was stopped"
