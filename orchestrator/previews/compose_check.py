"""`plan --compose-file`: does the runbook agree with the compose file it will deploy?

Checked: every service the runbook names with `file: new` exists; `container_name` equals the
service key (dry-run lines name containers, the plan check maps them back); engines'
`stop_grace_period` and HiCache budget default (through the runbook's variable) equal the runbook's;
what each scoped `up` drags in through `depends_on` is allowed by its `may_also`; then every fact of
orchestrator.previews.compose_facts. The file is read interpolated with its own defaults, or with
`env` (the host's env map, whose values are never shown).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from orchestrator.hosts.budget import parse_budget
from orchestrator.hosts.compose_file import BudgetExpr, ComposeFile, ComposeFileError
from orchestrator.language.runbook import SELECTED, Runbook
from orchestrator.previews.compose_facts import check_facts
from orchestrator.previews.runbook_lines import RunbookLines
from orchestrator.util.user_errors import UserError


def read_env_file(path: Path | None) -> dict[str, str] | None:
    """A host's env map as a dotenv file (`NAME=value` lines, `#` comments, optional `export `,
    one level of matching quotes stripped); None without one (the files' own defaults). Errors name
    the file and the line number, never a value."""
    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--env {path} is unreadable: {getattr(exc, 'strerror', None) or exc}") from None
    env: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").lstrip()
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not name.replace("_", "a").isalnum() or name[0].isdigit():
            raise UserError(f"--env {path}, line {n}: not a NAME=value line")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[name] = value
    return env


def check_against_compose_file(rb: Runbook, path: Path, *, env: Mapping[str, str] | None = None,
                               display: str | None = None) -> tuple[list[str], list[str], set[str]]:
    """(checks passed, problems, services the file defines). `display`: how problem lines name
    the file (default: the path as given)."""
    try:
        cf = ComposeFile.load(path)
    except ComposeFileError as exc:
        raise UserError(str(exc)) from None
    checks: list[str] = []
    problems: list[str] = []
    named: list[str] = []
    for steps in rb.step_lists():
        for s in steps:
            c = s.compose
            if c is not None and c.file == "new" and c.services != SELECTED:
                named += [x for x in c.services if x not in named]
            if s.logs is not None and s.logs.budget and s.logs.service not in named:
                named.append(s.logs.service)
    named += [e for b in rb.budgets() for e in b.engines if e not in named]
    missing = [s for s in named if s not in cf.services]
    if missing:
        problems.append(f"{path.name} does not define {', '.join(missing)}")
    else:
        checks.append(f"every service the runbook names with file: new is defined ({len(named)})")
    bad_names = [f"{k} (container_name {v.container_name!r})" for k, v in cf.services.items()
                 if v.container_name is not None and v.container_name != k]
    no_names = [s for s in named if s in cf.services and cf.services[s].container_name is None]
    if bad_names:
        problems.append("container_name differs from the service key: " + ", ".join(bad_names))
    if no_names:
        problems.append("no container_name (dry-run lines would name <project>-<service>-1): " + ", ".join(no_names))
    if not bad_names and not no_names:
        checks.append("container_name equals the service key")
    for budget, engine in [(b, e) for b in rb.budgets() for e in b.engines]:
        want = parse_budget(budget.default)
        if engine not in cf.services:
            continue
        svc = cf.services[engine]
        if svc.stop_grace_period_s != rb.timeouts.stop_grace:
            problems.append(f"{engine}: stop_grace_period {svc.stop_grace_period_s} s, the runbook expects {rb.timeouts.stop_grace:g} s")
        expr: BudgetExpr | None = cf.budget_of(engine)
        if expr is None:
            problems.append(f"{engine}: no SGLANG_HICACHE_RAM_BUDGET in its environment")
            continue
        if expr.variable != budget.variable:
            problems.append(f"{engine}: budget comes from {expr.variable or 'a literal'} ({expr.raw}), not {budget.variable}: "
                            f"the runbook's budget gate would not govern it")
        try:
            got = parse_budget(expr.default) if expr.default else None
        except ValueError:
            got = None
        if got is None or got != want:
            problems.append(f"{engine}: budget default {expr.default or '(none)'} in the file, the runbook expects {budget.default}")
        elif expr.variable == budget.variable:
            checks.append(f"{engine}: {expr.raw} (stop grace {svc.stop_grace_period_s:g} s)")
    for steps in rb.step_lists():
        for s in steps:
            if s.dry_run is None or s.dry_run.file != "new" or s.dry_run.services == SELECTED or s.plan is None or s.plan.tag_only:
                continue
            listed = [x for x in s.dry_run.services if x in cf.services]
            deps = sorted(cf.dependencies_of(listed)) if listed else []
            extra = [d for d in deps if d not in s.plan.may_also and d not in s.dry_run.services]
            if extra:
                problems.append(f"step {s.id}: a scoped up of {', '.join(listed)} also starts {', '.join(extra)} (depends_on), "
                                f"which its plan gate does not allow")
            elif deps:
                checks.append(f"step {s.id}: a scoped up also starts {', '.join(deps)} (depends_on), allowed")
    config_checks, config_problems = check_config_only_recreates(rb, path)
    fact_checks, findings = check_facts(rb, cf, dict(env or {}), RunbookLines(rb))
    checks += config_checks + fact_checks
    problems += config_problems + [f.line(display or str(path)) for f in findings]
    return checks, problems, set(cf.services)


def _repo_root(rb: Runbook, path: Path) -> Path | None:
    """The compose-files checkout `path` sits in, when it is the runbook's `file:` inside one."""
    parts = Path(rb.file).parts
    resolved = path.resolve()
    if len(resolved.parts) > len(parts) and resolved.parts[-len(parts):] == parts:
        return resolved.parents[len(parts) - 1]
    return None


def check_config_only_recreates(rb: Runbook, path: Path) -> tuple[list[str], list[str]]:
    """Both files at hand (the new file inside a compose-files checkout that also holds the
    `deploys:` files): the services whose only change is inline `configs:` content
    (compose_file.config_only_changes; docker/compose#11900) must be force-recreated, and only
    they. Forward (`file: new`) and back (`file: previous:...`, the rollbacks): a service of that
    set that a dry run names must be force-recreated by some dry run of the same direction; a
    forced dry run names nothing else."""
    from orchestrator.hosts.compose_file import config_only_changes

    root = _repo_root(rb, path)
    previous = [root / f for f in rb.deploys if (root / f).is_file()] if root is not None else []
    if not previous:
        return [], []
    try:
        new_text = path.read_text(encoding="utf-8")
        config_only = sorted({s for p in previous for s in config_only_changes(
            p.read_text(encoding="utf-8"), new_text, old_name=str(p), new_name=str(path))})
    except (OSError, ComposeFileError) as exc:
        return [], [f"the inline-configs comparison with {', '.join(str(p) for p in previous)} failed: {exc}"]
    problems: list[str] = []
    named: dict[str, set[str]] = {"new": set(), "previous": set()}
    forced: dict[str, set[str]] = {"new": set(), "previous": set()}
    for steps in rb.step_lists():
        for s in steps:
            spec = s.dry_run
            if spec is None or spec.services == SELECTED or (s.plan is not None and s.plan.tag_only):
                continue
            kind = "new" if spec.file == "new" else "previous"
            named[kind] |= set(spec.services)
            if spec.force_recreate:
                forced[kind] |= set(spec.services)
                extra = [x for x in spec.services if x not in config_only]
                if extra:
                    problems.append(f"step {s.id}: force_recreate on {', '.join(extra)}, whose change is not inline configs "
                                    f"content alone (compose recreates it when needed; force only {', '.join(config_only) or 'nothing'})")
    for kind, where in (("new", "to the new file"), ("previous", "back to the previous file")):
        missing = sorted((named[kind] & set(config_only)) - forced[kind])
        if missing:
            problems.append(f"{', '.join(missing)} differ only in inline configs content between {rb.file} and "
                            f"{', '.join(rb.deploys)}: compose reports them unchanged and keeps the old config "
                            f"(docker/compose#11900). Going {where}, dry-run and up each alone with force_recreate: true")
    if config_only and not problems:
        return [f"only inline configs content differs for {', '.join(config_only)}: force-recreated alone, both ways"], []
    return [], problems
