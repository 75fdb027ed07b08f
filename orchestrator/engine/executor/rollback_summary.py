"""The last line of a run that ended ROLLED_BACK: what it went back to and from where the target
came (the rollout's journal, the action log, or an operator's explicit --to-tag/--to-file), and
what still runs the new file (a forward step the rollback does not undo, e.g. gpu02's reconcile
of nginx) with the runbook's reason why that is safe (`rollback_keeps:`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.engine.rules.targets import group_targets
from orchestrator.hosts.clients.errors import ClientError

if TYPE_CHECKING:
    from orchestrator.engine.steps.activities import Activities

CONFIG_FILES = "com.docker.compose.project.config_files"


def targets_text(rt: Activities) -> str:
    groups = group_targets(rt.rb, rt.ctx.previous)
    if not groups:
        return ""
    back = "; ".join(f"{file}@{tag} ({', '.join(services)})" for (tag, file), services in groups.items())
    source = rt.ctx.previous_source
    return f"Back to {back}" + (f", target from {source}" if source else "")


async def still_on_new(rt: Activities) -> list[str]:
    """Running services whose container was created from the runbook's new file (docker/ps's
    config_files label), engines first never expected."""
    containers = await rt.ps()
    return sorted({c.service or c.name for c in containers
                   if c.state in ("running", "restarting")
                   and any(f.strip().endswith("/" + rt.rb.file) or f.strip() == rt.rb.file
                           for f in c.labels.get(CONFIG_FILES, "").split(","))})


async def rollback_summary(rt: Activities) -> str:
    parts = [t] if (t := targets_text(rt)) else []
    try:
        left = await still_on_new(rt)
    except ClientError as exc:
        parts.append(f"what still runs {rt.rb.file} is unknown (docker/ps could not be read: {type(exc).__name__})")
        left = []
    for svc in left:
        why = rt.rb.rollback_keeps.get(svc)
        if why:
            parts.append(f"{svc} stays on {rt.rb.file}, which is safe: {' '.join(why.split())}")
        else:
            parts.append(f"{svc} still runs {rt.rb.file} and the runbook says nothing of it: look at it")
    return "; ".join(parts)
