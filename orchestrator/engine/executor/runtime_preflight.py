"""What a run establishes before it acts (a part of `Runtime`, runtime.py).

The rollback targets: the newest successful up of every service a rollback needs, found in the
action log and checked against compose-manager's success record and this journal, then dry-run
so that a rollback never finds out after a stop that its target does not exist. And the tag:
merged to main and old enough (GitHub), unless the operator skipped that check.
"""

from __future__ import annotations

from orchestrator.hosts.clients.compose_manager import ComposeRequest
from orchestrator.hosts.clients.errors import ClientError
from orchestrator.engine.executor.targets import group_targets, journaled_successes, newest_successful, recorded_successes
from orchestrator.engine.foreign_change import new_mark
from orchestrator.engine.steps.outcome import StepOutcome, fail


class RuntimePreflight:
    """Rollback targets and the tag check; uses Runtime's clients, journal, runbook and context."""

    async def establish_previous(self) -> list[str]:
        """Fill `ctx.previous` for every service a rollback needs; the services it could not.

        The target is the newest `compose_up` in the action log that named the service *and*
        succeeded: compose-manager logs an up when it accepts it, whatever the outcome, so an
        entry alone is only an attempt. Success comes from compose-manager's own record
        (`/version` projects.<p>.current/previous) or from an up this journal saw succeed."""
        actions = await self.clients.compose.action_log()
        if not self.ctx.action_mark:  # this run's first position in the log (foreign-change detection)
            self.ctx.action_mark = new_mark(actions, self._last_effect_id())
        succeeded = await self._successful_deploys()
        missing = []
        for service in self.rb.previous_refs():
            if service in self.ctx.previous:
                continue
            found = newest_successful(actions, service, succeeded)
            if found is None:
                missing.append(service)
                continue
            self.ctx.previous[service] = {"tag": found.tag, "file": found.file, "commit": found.commit or ""}
        if not self.ctx.previous_source:
            self.ctx.previous_source = "the action log, checked against compose-manager's success record and the journal"
        return missing

    async def _successful_deploys(self) -> set[tuple[str, str]]:
        out: set[tuple[str, str]] = set()
        try:
            version = await self.clients.compose.version()
            if hasattr(version, "project"):
                out |= recorded_successes(version.project(self.entry.project))
        except ClientError:
            pass
        return out | journaled_successes(self.journal, self.run.host)

    async def validate_previous_targets(self) -> StepOutcome | None:
        """A dry run of every distinct rollback target (tag, file): a rollback must never find out
        after a stop that its target does not exist. None when all are accepted."""
        from orchestrator.hosts.ps_compare import split_by_definition

        running = {(c.service or c.name): c for c in await self.ps() if c.state in ("running", "restarting")}
        actions = await self.clients.compose.action_log()
        for (tag, file), all_services in group_targets(self.rb, self.ctx.previous).items():
            # a check names only what it cannot recreate (docker/compose#14029): services absent
            # or already running this very definition; the rest is checked by the rollback's own
            # dry run, after its stop
            services, held = split_by_definition(all_services, running, tag, file, actions, engines=set(self.rb.engines()))
            if held:
                self.emit("note", text=f"rollback target {file}@{tag}: {', '.join(held)} not dry-run now (a running engine, or "
                                       f"another definition a dry run could recreate); the rollback's own dry run checks it after its stop")
            if not services:
                continue
            req = ComposeRequest(tag=tag, file=file, services=tuple(services), project=self.entry.project, dry_run=True)
            res = await self.dry_run(req)
            if res.verdict != "done":
                assert res.outcome is not None
                return res.outcome if res.verdict == "changed" else fail(f"rollback target {file}@{tag}: {res.outcome.note}")
            assert res.stream is not None
            self.journal_read("dry_run", req, {"status": res.stream.status, "exit_code": res.stream.exit_code,
                                               "lines": [self.scrub(x) for x in res.stream.lines[-40:]]})
            if res.stream.status != "success":
                return fail(f"rollback target {file}@{tag} ({', '.join(services)}): its dry run failed: "
                            + self.scrub(" | ".join(res.stream.lines[-2:])))
        return None

    async def check_tag_age(self) -> tuple[bool, str] | None:
        """(ok, sentence), or None when the operator skipped the check."""
        from datetime import datetime, timezone

        from orchestrator.hosts.clients.github import GitHubUnreachable

        tag = self.run.tag or ""
        skip = self.ctx.skip_tag_age_check
        repo = self.entry.github_repo
        gh = self.clients.github
        if repo is None or gh is None:
            if skip:
                return None
            return False, (f"the inventory names no github_repo for {self.run.host}, so tag {tag}'s merge and age cannot be checked: "
                           f"set github_repo, or pass --skip-tag-age-check")
        hours = self.rb.min_tag_age / 3600
        try:
            res = await gh.check_tag(repo, tag, min_age_hours=hours, now=datetime.now(timezone.utc))
        except GitHubUnreachable as exc:
            if skip:
                self.emit("note", text=f"GitHub could not be reached ({self.scrub(str(exc))}); going on: --skip-tag-age-check")
                return None
            return False, (f"GitHub could not be reached to check tag {tag} ({self.scrub(str(exc))}): its merge and age are "
                           f"unverified. Re-run with --skip-tag-age-check to go on without that check")
        if res.ok:
            return True, f"tag {tag} is merged to main in {repo} and old enough (commit {(res.commit or '')[:12]}, {res.committed_at})"
        return False, f"tag {tag} in {repo}: {res.reason}"
