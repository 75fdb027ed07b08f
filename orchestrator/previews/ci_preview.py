"""`orchestrate ci-preview --changed FILE...`: the compose-files repository's CI job, as code.

For every changed file a packaged runbook names (`runbooks_affected_by`), the offline plan of each of
the runbook's hosts, as markdown for a CI job summary:

- the runbook's `file:` changed: the plan with the compose-file check (`plan --compose-file`); a
  mismatch fails the job (exit 1) and is named;
- a file in its `deploys:` (where its rollbacks go back to) changed: the plan without the check (its
  rules are about the new file), so the reviewer sees which rollback the change reaches;
- a file no runbook names: listed as unaffected; the job passes.

Several runbooks may deploy one file, each for its own revision of it: a change must match at least
one. None matching fails the job with every runbook's mismatches; otherwise the others' sections say
they describe another revision, with their differences.

With a base ref (the pull request's merge base), each checked file is compared with its version there
(or, for a new file, with the runbook's `deploys:` file there): per service, what the rollout
recreates; a changed engine the runbook does not stop first or a config-only service it does not
force-recreate fails the job (orchestrator.previews.compose_diff).

Offline like `plan`: no host is contacted, the tag shows as `<tag of this change>`, and without an
inventory requests show the default compose project.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from orchestrator.hosts.compose_file import ComposeFileError
from orchestrator.language.machine import compile_rollout
from orchestrator.language.runbook import RUNBOOK_DIR, Runbook, load_runbook, runbook_names
from orchestrator.previews.plan import build_plan, render_markdown
from orchestrator.util.user_errors import UserError

CI_TAG = "<tag of this change>"


def _norm(path: str) -> str:
    return str(PurePosixPath(path.replace("\\", "/")))


@dataclass(frozen=True)
class Affected:
    runbook: Runbook
    #: `new`: the file the runbook deploys (checked); `previous`: a file its rollbacks go back to.
    role: str


def runbooks_affected_by(path: str, directory: Path = RUNBOOK_DIR) -> list[Affected]:
    """The packaged runbooks that name `path` (relative to the compose-files repository root) as
    their `file:` or in their `deploys:`, in name order."""
    want = _norm(path)
    out: list[Affected] = []
    for name in runbook_names(directory):
        rb = load_runbook(str(directory / f"{name}.yaml"))
        if _norm(rb.file) == want:
            out.append(Affected(rb, "new"))
        elif want in {_norm(f) for f in rb.deploys}:
            out.append(Affected(rb, "previous"))
    return out


def preview(changed: list[str], repo: Path, *, projects: dict[str, str | None] | None = None,
            env: dict[str, str] | None = None, base_ref: str | None = None) -> tuple[str, list[str]]:
    """(markdown, mismatches): one section per (changed file, affected runbook, host). `env`: a
    host's env map the files are interpolated with (default: the defaults the files write).
    `base_ref`: a git ref of `repo` to diff each checked file against."""
    from orchestrator.previews.compose_check import check_against_compose_file
    from orchestrator.previews.compose_diff import check_changes, render_changes, service_changes
    from orchestrator.previews.runbook_lines import RunbookLines

    out = ["## orchestrate: rollout preview", ""]
    failures: list[str] = []
    unaffected: list[str] = []
    for path in changed:
        affected = runbooks_affected_by(path)
        if not affected:
            unaffected.append(path)
            continue
        file_on_disk = repo / path
        tables: dict[str, list[str]] = {}
        results: list[tuple[Affected, list[str], list[str], set[str] | None]] = []
        for a in affected:
            checks: list[str] = []
            problems: list[str] = []
            new_services = None
            if a.role == "new":
                if not file_on_disk.is_file():
                    problems = [f"{path} was deleted, but runbook {a.runbook.name} deploys it"]
                else:
                    checks, problems, new_services = check_against_compose_file(a.runbook, file_on_disk, env=env, display=path)
                    # what the host runs before this rollout: the runbook's `deploys:` file, else this file
                    base = _base_version(repo, base_ref, [*a.runbook.deploys, path]) if base_ref else None
                    if base is not None:
                        since = f"{base[0]} at {base_ref}"
                        try:
                            changes = service_changes(base[1], file_on_disk.read_text(encoding="utf-8"), env,
                                                      old_name=f"{base_ref}:{base[0]}", new_name=path)
                        except ComposeFileError as exc:
                            checks.append(f"no diff with {since}: {exc}")
                        else:
                            diff_checks, findings = check_changes(a.runbook, changes, RunbookLines(a.runbook), since)
                            checks += diff_checks
                            problems += [f.line(path) for f in findings]
                            tables.setdefault(since, render_changes(changes, path, since))
            results.append((a, checks, problems, new_services))
        out += [line for table in tables.values() for line in table]
        matched = any(not problems for a, _, problems, _ in results if a.role == "new")
        for a, checks, problems, new_services in results:
            rb = a.runbook
            binding = bool(problems) and not matched
            verdict = ("**mismatch**" if binding else "**another revision**: not matched, the job passes on the runbook that matches"
                       ) if problems else ("checked" if a.role == "new" else "rollback target, not checked")
            out += [f"### `{path}` — runbook `{rb.name}` ({verdict})", ""]
            if a.role == "previous":
                out += [f"`{path}` is the previous file runbook `{rb.name}`'s rollbacks go back to; the compose-file "
                        f"check applies to its new file `{rb.file}` only.", ""]
            elif problems and not binding:
                out += [f"Runbook `{rb.name}` also deploys `{path}`, for another revision of it; another runbook that deploys "
                        f"it matches this change. Its differences are listed for the reviewer.", ""]
            if binding:
                failures += [f"{path} vs runbook {rb.name}: {p}" for p in problems]
            for host in rb.hosts:
                plan = build_plan(rb, compile_rollout(rb), host=host, tag=CI_TAG, project=(projects or {}).get(host),
                                  new_file_services=new_services)
                plan.checks, plan.problems = checks, problems
                out += [render_markdown(plan), ""]
    if unaffected:
        out += ["### Not deployed by any runbook", ""] + [f"- `{p}`" for p in unaffected] + [""]
    if not changed:
        out += ["No changed files.", ""]
    return "\n".join(out), failures


def _base_version(repo: Path, ref: str, paths: list[str]) -> tuple[str, str] | None:
    """(path, text) of the first of `paths` that exists at `ref` in the git checkout `repo`."""
    for path in paths:
        r = subprocess.run(["git", "-C", str(repo), "show", f"{ref}:{_norm(path)}"], capture_output=True, check=False)
        if r.returncode == 0:
            return _norm(path), r.stdout.decode("utf-8", errors="replace")
    return None


def inventory_projects(inventory: Path | None) -> dict[str, str | None]:
    if inventory is None:
        return {}
    from orchestrator.hosts.inventory import load_inventory

    inv = load_inventory(inventory)
    return {name: inv.host(name).project for name in inv.hosts}


def check_repo(repo: Path) -> Path:
    if not repo.is_dir():
        raise UserError(f"--repo {repo} is not a directory: pass the compose-files checkout")
    return repo
