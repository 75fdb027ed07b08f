"""The last line of a run that ended ROLLED_BACK: what it went back to and where the target came
from, what still runs the new definition (with the runbook's `rollback_keeps:` reason), and what
ran when the run started and runs no more.

The new definition is the runbook's file *at the run's tag* (a canary's new and previous files are
one path at two tags): a container's file says where to look, the action log's last up at which
tag, and a file whose content (file_sha256) is the same at both tags differs in nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.engine.rules.targets import group_targets
from orchestrator.hosts.clients.errors import ClientError
from orchestrator.hosts.parsers.action_log import Action, last_deploy
from orchestrator.hosts.ps_compare import runs_from

if TYPE_CHECKING:
    from orchestrator.engine.steps.activities import Activities
    from orchestrator.hosts.parsers.docker_ps import Container


def targets_text(rt: Activities) -> str:
    groups = group_targets(rt.rb, rt.ctx.previous)
    if not groups:
        return ""
    back = "; ".join(f"{file}@{tag} ({', '.join(services)})" for (tag, file), services in groups.items())
    source = rt.ctx.previous_source
    return f"Back to {back}" + (f", target from {source}" if source else "")


def differs(service: str, actions: list[Action], new: tuple[str | None, str], previous: set[tuple[str, str]]) -> bool:
    """Does `service`, running from the new file, run the new definition: its last up was at the
    new tag (none: cannot tell, so it does), with content unlike a previous target's."""
    last = last_deploy(actions, service)
    if last is None:
        return True
    if (last.tag, last.file) != new:
        return False
    before = {a.file_sha256 for a in actions if a.action == "compose_up" and (a.tag, a.file) in previous and a.file_sha256}
    return not (last.file_sha256 and last.file_sha256 in before)


def stopped_since_start(rt: Activities, containers: list[Container]) -> list[str]:
    """Services (not engines: `host now` says those) that ran when the run started and run no more
    (a soak relay the rollback stopped and does not start again)."""
    before = rt.ctx.before.ps if rt.ctx.before is not None else {}
    now = {n for c in containers if c.state in ("running", "restarting") for n in (c.name, c.service) if n}
    return sorted(n for n, v in before.items()
                  if v.get("state") in ("running", "restarting") and n not in now and not rt.rb.replica_of(n))


async def still_on_new(rt: Activities, containers: list[Container]) -> list[str]:
    """Running services that run the runbook's new file at the run's tag (see the module doc)."""
    on_file = {c.service or c.name for c in containers if c.state in ("running", "restarting") and runs_from(c, rt.rb.file)}
    if not on_file:
        return []
    actions = await rt.action_log()
    previous = {(p["tag"], p["file"]) for p in rt.ctx.previous.values() if p.get("tag") and p.get("file")}
    return sorted(s for s in on_file if differs(s, actions, (rt.run.tag, rt.rb.file), previous))


async def rollback_summary(rt: Activities) -> str:
    parts = [t] if (t := targets_text(rt)) else []
    try:
        containers = await rt.ps()
        left = await still_on_new(rt, containers)
    except ClientError as exc:
        parts.append(f"what still runs {rt.rb.file}@{rt.run.tag} is unknown (docker/ps or the action log could not be read: "
                     f"{type(exc).__name__})")
        containers, left = [], []
    for svc in left:
        why = rt.rb.rollback_keeps.get(svc)
        if why:
            parts.append(f"{svc} stays on {rt.rb.file}, which is safe: {' '.join(why.split())}")
        else:
            parts.append(f"{svc} still runs {rt.rb.file}@{rt.run.tag} and the runbook says nothing of it: look at it")
    for svc in stopped_since_start(rt, containers) if containers else []:
        parts.append(f"{svc} ran when the run started and runs no more (this run stopped it and its rollback does not "
                     f"start it again): start it again if it is still wanted")
    return "; ".join(parts)
