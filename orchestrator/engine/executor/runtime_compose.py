"""The compose calls a step handler sends (a part of `Runtime`, runtime.py).

A request built from the runbook's step; a dry run, with docker/ps compared around it (a dry run
that changed real containers halts the run, docker/compose#14029); a mutating call, journaled as an
intent before it is sent and an outcome after (a resume reuses the outcome, or records it unknown
and settles it by observation, runtime_waits.py: never sent again); and the ledgers a call updates
(what this run deployed, which containers it created and stopped).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.hosts.clients.compose_manager import ComposeRequest, StreamOutcome
from orchestrator.hosts.clients.errors import Busy, ClientError, ServerError, TagNotFound, TagTooRecent, TransportError
from orchestrator.hosts.envmap import EnvMap
from orchestrator.engine.executor.context import DryRunRecord
from orchestrator.engine.executor.runtime_journal import ForeignChange
from orchestrator.journal.base import EffectRecord
from orchestrator.hosts.parsers.docker_ps import Container, snapshot
from orchestrator.hosts.ps_compare import compare_ps, describe_changes
from orchestrator.language.references import resolve_file, resolve_services
from orchestrator.language.runbook import Step
from orchestrator.engine.steps.outcome import StepOutcome, fail, halt


@dataclass
class DryRunCall:
    """What sending a dry run gave: `verdict` done (see `stream`), or an outcome to return."""

    verdict: str
    stream: StreamOutcome | None = None
    after: list[Container] | None = None
    outcome: StepOutcome | None = None


class RuntimeCompose:
    """Compose requests, dry runs and journaled mutating calls; uses Runtime's clients, journal, context."""

    def request(self, step: Step, *, dry_run: bool) -> ComposeRequest:
        spec = step.compose
        assert spec is not None
        tag, file = resolve_file(spec.file, self.rb, self.run.tag, self.ctx.previous)
        # force_recreate only as the runbook's step says (the loader allows it on no engine: the
        # services whose only change is inline configs content, docker/compose#11900); a down never
        force = bool(spec.force_recreate) and step.down is None
        return ComposeRequest(tag=tag, file=file, services=resolve_services(spec, self.ctx.selected),
                              project=self.entry.project, force_recreate=force, dry_run=dry_run,
                              allow_force_recreate=force)

    def dry_run_record(self, req: ComposeRequest, env: EnvMap, after: list[Container] | None) -> DryRunRecord:
        snap = {c.name: [c.id, c.created_at, c.state] for c in (after or [])}
        return DryRunRecord(tag=req.tag, file=req.file, services=list(req.services), project=req.project,
                            env_fingerprint=env.fingerprint(), force_recreate=req.force_recreate, after=snap)

    def same_as_checked(self, req: ComposeRequest, env: EnvMap) -> bool:
        from orchestrator.engine.executor.context import same_request

        return same_request(self.ctx.checked_dry_run, tag=req.tag, file=req.file, services=req.services, project=req.project,
                            env_fingerprint=env.fingerprint(), force_recreate=req.force_recreate)

    async def dry_run(self, req: ComposeRequest) -> DryRunCall:
        env = await self.ensure_env()
        before_list = await self.ps()
        before = snapshot(before_list)
        attempt = 0
        while True:
            attempt += 1
            try:
                outcome = await self.clients.compose.up(req, env)
                break
            except (TagTooRecent, TagNotFound) as exc:
                return DryRunCall("refused", outcome=fail(f"compose-manager refused the tag {req.tag}: {self.scrub(exc.detail)}"))
            except (ServerError, TransportError) as exc:
                # A dry run plans only, and docker/ps is compared around it: safe to ask again,
                # unless it changed something (then the comparison halts the run).
                if attempt >= 3:
                    return DryRunCall("failed", outcome=fail(f"the dry run failed {attempt} times: {self.scrub(str(exc))}"))
                now = await self.ps()
                if snapshot(now) != before:
                    named = describe_changes(compare_ps(before_list, now)) or "container states"
                    return DryRunCall("changed", outcome=halt(f"a dry run that failed also changed real containers: {named} "
                                                              "(docker/compose#14029); inspect the host"))
                self.log.warning("dry_run_retried", error=type(exc).__name__)
                await self.wait()
        after_list = await self.ps()
        changes = compare_ps(before_list, after_list)
        if changes:
            # a dry run is never in the action log: an entry this run did not make is someone else's
            foreign = await self.check_foreign(advance=False)
            if foreign:
                return DryRunCall("changed", outcome=halt(f"{foreign} (changed: {describe_changes(changes)})"))
            return DryRunCall("changed", outcome=halt(
                f"the dry run of {', '.join(req.services)} changed real containers: {describe_changes(changes)} "
                "(docker/compose#14029: a dry run that recreates for real)"))
        return DryRunCall("done", stream=outcome, after=after_list)

    async def resume_effect(self, eff: EffectRecord) -> dict[str, Any]:
        baseline = dict(eff.request.get("baseline", {}))
        if eff.outcome is not None:
            self.log.info("effect_reused", kind=eff.kind, status=eff.outcome.get("status"))
            return dict(eff.outcome) | {"baseline": baseline}
        self.log.warning("effect_outcome_unknown_after_crash", kind=eff.kind)
        outcome = {"status": "unknown", "error": "the runner stopped after sending; outcome not recorded"}
        self.journal.record_outcome(self.lease, self.run.run_id, eff.effect_id, outcome)
        return outcome | {"baseline": baseline}

    async def mutate(self, kind: str, req: ComposeRequest, baseline: dict[str, Any]) -> dict[str, Any]:
        """Check for foreign changes, journal the intent, send once, journal the outcome."""
        env = await self.ensure_env()
        foreign = await self.check_foreign(advance=True)
        if foreign:
            raise ForeignChange(foreign)
        if kind == "compose_up":  # a one-shot sent again may exist again, whatever the outcome
            self.ctx.oneshots_removed = [s for s in self.ctx.oneshots_removed if s not in req.services]
        intent = self.journal.record_intent(
            self.lease, self.run.run_id, self.visit_key, kind,
            self.redactor.scrub_obj({"request": req.redacted(), "baseline": baseline}), mutating=True,
        )
        self.emit("effect", action=kind, services=list(req.services), file=req.file, tag=req.tag)
        call = self.clients.compose.down if kind.startswith("compose_down") else self.clients.compose.up
        try:
            res = await call(req, env)
            outcome: dict[str, Any] = {"status": res.status, "exit_code": res.exit_code,
                                       "lines": [self.scrub(x) for x in res.lines[-30:]],
                                       "error": self.scrub(res.error or "")}
        except (Busy, TransportError) as exc:
            outcome = {"status": "refused", "error": self.scrub(f"{type(exc).__name__}: {exc}")}
        except ServerError as exc:
            outcome = {"status": "unknown", "error": self.scrub(f"{type(exc).__name__}: {exc}")}
        except ClientError as exc:
            outcome = {"status": "refused", "error": self.scrub(f"{type(exc).__name__}: {exc}")}
        self.journal.record_outcome(self.lease, self.run.run_id, intent.effect_id, outcome)
        self.log.info("effect_outcome", kind=kind, status=outcome["status"])
        return outcome | {"baseline": baseline}

    def mark_deployed(self, req: ComposeRequest) -> None:
        self.ctx.deployed.update({s: {"tag": req.tag, "file": req.file} for s in req.services})
        self.ctx.oneshots_removed = [s for s in self.ctx.oneshots_removed if s not in req.services]

    async def record_ownership(self, req: ComposeRequest, baseline: dict[str, Any], *, up: bool) -> None:
        """The run's container ledger after a compose call (orchestrator.engine.ownership): an up's new IDs
        of the services it named are `created`; IDs gone since the journaled baseline are `stopped`
        (a down: of the services it named; an up: any, its --remove-orphans included). Called again
        on resume from the intent's baseline, so the ledger survives a crash before the transition."""
        from orchestrator.engine import ownership

        before = ownership.baseline_ids(baseline)
        try:
            now = await self.ps()
        except ClientError:
            return  # docker/ps unreadable: the ledger is never guessed
        state = self.node.id if self.node is not None else self.visit_key
        if up:
            ownership.record(self.ctx.created, ownership.created_ids(before, now, req.services), state)
            ownership.record(self.ctx.stopped, ownership.gone_ids(before, now), state)
        else:
            ownership.record(self.ctx.stopped, ownership.gone_ids(before, now, req.services), state)
