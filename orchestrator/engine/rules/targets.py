"""Rollback targets: the previous *successful* deploy of each service, and the distinct
(tag, file) pairs a rollback goes back to. Shared by the executor's preflight, `plan --live`
and `orchestrate rollback`, so the three can never disagree.

compose-manager logs an up in its action log when it accepts it, whatever the outcome, so an
entry alone is only an attempt. Success comes from its own record (`/version`
projects.<p>.current/previous, written only after an up succeeded) or from an up our journal saw
succeed; the action log says which services each up named.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from orchestrator.hosts.parsers.action_log import Action
from orchestrator.language.runbook import Runbook

#: How a rollback's journaled `previous_source` names an operator's explicit target (--to-tag/--to-file),
#: beside a journaled rollout and without one.
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
    out: set[tuple[str, str]] = set()
    for rec in (getattr(project_versions, "current", None), getattr(project_versions, "previous", None)):
        if rec is not None and rec.tag and rec.file:
            out.add((rec.tag, rec.file))
    return out


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
