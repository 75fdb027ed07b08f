"""What the rollout will recreate, from the diff of the file at the base ref and the pull request's.

Per service, as compose's config hash decides it (the interpolated definition less `HASH_EXCLUDED`):
`recreated` (an `up` naming it recreates it); `config-only` (only an inline `configs:` entry it mounts
changed: compose keeps the old config, docker/compose#11900, so it needs a scoped force-recreate);
`unchanged`, `added`, `removed`.

Held against the runbook's forward phases: a recreated engine is stopped (`down`) before the `up`
that starts it (one replica serves at every moment; its stop grace is honoured) and every changed
engine is started by some phase; a config-only service is force-recreated by a forward `dry_run` and
`up`. Each miss is a `Finding` whose expected value is the runbook line to add.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.hosts.compose_file import HASH_EXCLUDED, ComposeFile, config_only_changes, interpolate
from orchestrator.language.runbook import Runbook
from orchestrator.previews.compose_facts import Finding
from orchestrator.previews.runbook_lines import RunbookLines

KINDS = ("recreated", "config-only", "added", "removed", "unchanged")


def service_changes(old_text: str, new_text: str, env: Mapping[str, str] | None = None, *,
                    old_name: str = "<base>", new_name: str = "<new>") -> dict[str, str]:
    """service -> its kind of change (KINDS), in the new file's order, then the removed ones."""
    env = dict(env or {})
    old = ComposeFile.from_text(old_text, old_name)
    new = ComposeFile.from_text(new_text, new_name)
    config_only = set(config_only_changes(old_text, new_text, old_name=old_name, new_name=new_name))

    def hashed(body: dict[str, Any]) -> Any:
        return interpolate({k: v for k, v in body.items() if k not in HASH_EXCLUDED}, env)

    out: dict[str, str] = {}
    for name, svc in new.services.items():
        if name not in old.services:
            out[name] = "added"
        elif hashed(svc.body) != hashed(old.services[name].body):
            out[name] = "recreated"
        else:
            out[name] = "config-only" if name in config_only else "unchanged"
    out.update({name: "removed" for name in old.services if name not in new.services})
    return out


def check_changes(rb: Runbook, changes: dict[str, str], lines: RunbookLines, base: str) -> tuple[list[str], list[Finding]]:
    findings: list[Finding] = []
    engines = set(rb.engines()) | {e for b in rb.budgets() for e in b.engines}
    downed: dict[str, set[str]] = {}
    started: dict[str, tuple[str, str]] = {}
    forced: set[str] = set()
    forced_dry: set[str] = set()
    for ph in rb.phases:
        down_here: set[str] = set()
        for st in ph.steps:
            if st.down is not None and isinstance(st.down.services, list):
                down_here |= set(st.down.services)
            for spec, kind in ((st.dry_run, "dry_run"), (st.up, "up")):
                if spec is None or spec.file != "new" or not isinstance(spec.services, list):
                    continue
                if spec.force_recreate:
                    (forced if kind == "up" else forced_dry).update(spec.services)
                if kind == "up":
                    for s in spec.services:
                        started.setdefault(s, (ph.name, st.id))
                        downed.setdefault(s, set()).update({ph.name} if s in down_here else set())
    for service, kind in changes.items():
        if service not in engines or kind not in ("recreated", "added"):
            continue
        if service not in started:
            if kind == "recreated":
                findings.append(Finding(service, f"change since {base}", kind,
                                        "a phase that stops it and starts it from the new file: add `down: {file: new, "
                                        f"services: [{service}]}}`, then `dry_run` and `up` of it", lines.at("phases")))
            continue
        phase, step = started[service]
        if kind == "recreated" and phase not in downed.get(service, set()):
            findings.append(Finding(service, f"change since {base}", "recreated (an engine)",
                                    f"stopped first: add `down: {{file: new, services: [{service}]}}` before step {step}",
                                    lines.step(phase, step, "up")))
    for service, kind in changes.items():
        if kind != "config-only" or service in engines:
            continue
        if service not in forced or service not in forced_dry:
            findings.append(Finding(service, f"change since {base}", "config-only (compose keeps the old config, "
                                    "docker/compose#11900)",
                                    f"a scoped force-recreate: add `dry_run: {{file: new, services: [{service}], force_recreate: true}}` "
                                    f"and the same `up`", lines.at("phases")))
    counts = {k: sorted(s for s, v in changes.items() if v == k) for k in KINDS}
    checks = [f"since {base}: " + "; ".join(f"{k} {', '.join(v)}" for k, v in counts.items() if v and k != "unchanged")
              + (" — each stopped first or force-recreated as the runbook needs" if not findings else "")]
    return checks, findings


def render_changes(changes: dict[str, str], path: str, base: str) -> list[str]:
    """Markdown: the table of what the rollout recreates."""
    out = [f"### `{path}`: what the rollout will recreate (vs `{base}`)", "", "| service | change |", "|---|---|"]
    out += [f"| `{s}` | {k} |" for s, k in changes.items()]
    return out + [""]
