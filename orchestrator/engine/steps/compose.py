"""The compose steps: a dry run (checked), an up (applied only after its dry run), a scoped down.

- a dry run that changed docker/ps (docker/compose#14029) halts;
- a forced recreate (inline `configs:` content, docker/compose#11900) that the dry run does not plan
  would leave the old config. The remedy, once per visit: a scoped down of those services through
  `down`, then the dry run again; a second miss fails the gate;
- an up is applied only when it is the exact request its dry run checked (with the env map) and
  docker/ps has not changed since; otherwise RETRY its dry run (capped), or halt without one;
- an up or down this visit already journaled (a resume) is settled first, never sent again blindly;
- an engine is stopped only while it does not serve or another replica's serves, else halt.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from orchestrator.engine.context import DryRunPlan
from orchestrator.engine.rules.dry_run_check import judge_dry_run
from orchestrator.engine.rules.ownership import ps_ids
from orchestrator.engine.steps.base import Activities, Node, Step, StepOutcome, fail, halt, ok, register, retry, skip
from orchestrator.engine.steps.checks import budget_verdict, target_needs_budget
from orchestrator.engine.steps.outcome import lock_held
from orchestrator.hosts.parsers.docker_ps import by_service, changed_containers, snapshot
from orchestrator.hosts.parsers.dry_run import parse_dry_run
from orchestrator.language.runbook import SELECTED, ComposeSpec

#: The id suffix of a forced recreate's own down (exempt from rollback ownership in `down`).
CONFIG_DOWN_SUFFIX = "-config-down"


@register("dry_run")
async def dry_run(rt: Activities, node: Node, step: Step) -> StepOutcome:
    assert step.plan is not None
    env = await rt.ensure_env()
    req = rt.request(step, dry_run=True)
    env_changed = rt.ctx.budget_env_fingerprint and env.fingerprint() != rt.ctx.budget_env_fingerprint
    if env_changed and node.section in ("rollback", "full_rollback") and not target_needs_budget(rt.rb, req.file, req.services):
        # a rollback is judged by what its target needs: the new engines' budget is not its rule
        rt.emit("note", text=f"the host's env map changed since the budget was checked; {', '.join(req.services)} from "
                             f"{req.file} is not held to the new engines' budget rule (its dry run and start judge it)")
    elif env_changed:
        recheck = budget_verdict(rt)
        if recheck.event.value != "ok":
            return fail("the env map changed since preflight and no longer passes the budget check: " + recheck.note)
        rt.emit("note", text="the host's env map changed since the last dry run; the budget was checked again")
    rt.ctx.checked_dry_run = None
    res = await rt.dry_run(req)
    if res.verdict != "done":
        assert res.outcome is not None  # every verdict but done carries the outcome to return
        return res.outcome  # refused tag, repeated failure, a held lock or docker/ps changed (halt)
    outcome = res.stream
    assert outcome is not None  # a done dry run carries its stream
    lines = outcome.lines
    rt.journal_dry_run(req, outcome)
    if outcome.status != "success":
        return fail(f"the dry run did not succeed ({outcome.status}, exit {outcome.exit_code}): " + " | ".join(lines[-3:]))
    if step.plan.tag_only:
        return ok(f"tag {req.tag} and {req.file} accepted by compose-manager (dry run only)")
    plan = parse_dry_run(lines, project=rt.entry.project)
    # forced services the plan neither creates nor recreates: their new config would not take
    stale = [s for s in req.services if req.force_recreate and plan.actions.get(s) not in ("created", "recreated")]
    remedy_key = f"{node.id}:config-down"
    if stale and not rt.ctx.retries.get(remedy_key):
        rt.ctx.retries[remedy_key] = 1
        stopped = await _stop_for_recreate(rt, node, step, stale)
        if stopped.event.value != "ok":
            return stopped
        return await dry_run(rt, node, step)
    if stale:
        return fail(f"dry run of {', '.join(req.services)} from {req.file}@{req.tag}: force_recreate does not recreate "
                    f"{', '.join(stale)} even after a scoped down, so its new inline config would not take")
    listed = list(req.services) if step.plan.change == SELECTED else list(step.plan.change or req.services)
    verdict = judge_dry_run(plan, listed, may_also=step.plan.may_also, allow_unchanged=step.plan.allow_unchanged)
    rt.ctx.plans[node.id] = DryRunPlan(actions=dict(plan.actions), verdict=verdict.verdict)
    if verdict.verdict == "refuse":
        quoted = (" Plan lines: " + " | ".join(verdict.quoted)) if verdict.quoted else ""
        return fail(f"dry run of {', '.join(req.services)} from {req.file}@{req.tag}: {verdict.reason}.{quoted}")
    if step.plan.select_changed:
        rt.ctx.selected = verdict.changed
    if verdict.verdict == "skip":
        return skip(verdict.reason)
    rt.ctx.checked_dry_run = rt.dry_run_record(req, env, res.after)
    return ok(verdict.reason)


async def _stop_for_recreate(rt: Activities, node: Node, step: Step, services: list[str]) -> StepOutcome:
    """The scoped down of `services` (never an engine) that lets a forced recreate's new config take."""
    engines = [s for s in services if rt.rb.replica_of(s)]
    if engines:  # the loader refuses force_recreate on an engine; never stop one for a config
        return halt(f"refusing to stop {', '.join(engines)} for a config recreate: an engine is never stopped for that")
    stop = Step(id=f"{step.id}{CONFIG_DOWN_SUFFIX}", say=f"Stop {', '.join(services)} so that its new config takes",
                down=ComposeSpec(file=step.spec(ComposeSpec).file, services=list(services)))
    rt.emit("note", text=f"{', '.join(services)}: the forced dry run does not recreate it (its new inline config would not "
                         f"take): a scoped down of exactly that, then the dry run again")
    return await down(rt, node, stop)


@register("up")
async def up(rt: Activities, node: Node, step: Step) -> StepOutcome:
    env = await rt.ensure_env()
    req = rt.request(step, dry_run=False)
    recorded = rt.recorded_effect("compose_up")
    if recorded is not None:
        # resume: what this visit already sent is settled first, before any comparison
        outcome = await rt.resume_effect(recorded)
    else:
        checked = rt.ctx.checked_dry_run
        if checked is None or (checked.tag, checked.file, tuple(checked.services), checked.project) != (
            req.tag, req.file, tuple(req.services), req.project
        ):
            return halt("refusing to apply: no checked dry run of this exact request precedes it")
        if not rt.same_as_checked(req, env):
            rt.ctx.checked_dry_run = None
            return _again(rt, node, "the env map changed since the dry run")
        containers = await rt.ps()
        if changed_containers(checked.after, snapshot(containers)):
            rt.ctx.checked_dry_run = None
            return _again(rt, node, "containers changed since the dry run")
        svc = by_service(containers)
        baseline = {"ids": {s: (svc[s].id if s in svc else None) for s in req.services},
                    "actions": await rt.action_count(), "record": await rt.success_record(),
                    "ps": ps_ids(containers)}  # the whole docker/ps: what this up creates and removes, by ID
        outcome = await rt.mutate("compose_up", req, baseline)
    rt.ctx.checked_dry_run = None
    verdict = await _judge(rt, node, req, outcome)
    if outcome.get("status") != "refused":
        await rt.record_ownership(req, outcome.get("baseline", {}), up=True)
    return verdict


def _again(rt: Activities, node: Node, why: str) -> StepOutcome:
    used = rt.ctx.retries.get(node.id, 0)
    if used < rt.table.retry_cap(node.id):
        rt.ctx.retries[node.id] = used + 1
        return retry(f"{why}: planning again")
    return fail(f"{why}, again after planning anew")


async def _judge(rt: Activities, node: Node, req: Any, outcome: dict[str, Any]) -> StepOutcome:
    status = outcome["status"]
    if status == "success":
        rt.mark_deployed(req)
        return ok(f"applied {', '.join(req.services)} from {req.file}@{req.tag}")
    if status == "failure":
        return fail(f"compose up failed (exit {outcome.get('exit_code')}): " + " | ".join(outcome.get("lines", [])[-3:]))
    if status == "refused":
        if outcome.get("lock_held") and not any(rt.rb.replica_of(s) for s in req.services):
            return lock_held(rt.rb.timeouts.gone, "up", req.services, outcome.get("error", ""))
        # an engine's up refused: the phase's rollback brings the replica's previous engine back
        return fail(f"compose-manager did not run the up: {outcome.get('error')}")
    verdict = await rt.settle_up(req, outcome.get("baseline", {}))
    if verdict == "applied":
        rt.mark_deployed(req)
        return ok("the up's outcome was unknown, but compose-manager's record and docker/ps show it took effect")
    if verdict == "not_applied":
        return _again(rt, node, "the up's outcome was unknown and it did not take effect (docker/ps unchanged)")
    return halt("the up's outcome could not be established from compose-manager's status, docker/ps and the action log: " + verdict)


@register("down")
async def down(rt: Activities, node: Node, step: Step) -> StepOutcome:
    await rt.ensure_env()
    req = rt.request(step, dry_run=False)
    downs = rt.visit_effects("compose_down")  # the first down and any resend of this visit
    resends = max(0, len(downs) - 1)
    if downs:
        sent = downs[0].request.get("request", {}).get("services")
        if sent and tuple(sent) != tuple(req.services):  # a rollback's down narrowed to what the run owns
            req = replace(req, services=tuple(sent))
        # resume: the newest down this visit sent is settled first; earlier resends count
        outcome = await rt.resume_effect(downs[-1])
        if resends:
            outcome["baseline"] = dict(downs[0].request.get("baseline", {}))
    else:
        containers = await rt.ps()
        svc = by_service(containers)
        present = [s for s in req.services if s in svc]
        # a config recreate's own down restores the target: it may stop a namesake this run did not create
        remedy = step.id.endswith(CONFIG_DOWN_SUFFIX)
        left = {} if remedy else rt.not_owned(node, [svc[s] for s in present])
        if left:  # a rollback stops only containers this run created, never a namesake
            present = [s for s in present if s not in left]
            req = replace(req, services=tuple(s for s in req.services if s not in left))
            if not req.services:
                return ok(" ".join(left.values()))
        # docker/ps lists running containers only: a finished one-shot's down is always sent
        oneshots = [s for s in req.services if s in rt.rb.oneshot_services() and s not in rt.ctx.oneshots_removed]
        if not present and not oneshots:
            return ok(f"{', '.join(req.services)} not running: nothing to stop")
        refusal = await rt.stop_guard(present)
        if refusal:
            return halt(refusal)
        engines = {c.name for c in containers if rt.rb.replica_of(c.service or c.name)}
        for s in present:  # an engine's GPUs are held by no other engine before it stops
            holders = await rt.gpu_holders(rt.rb.replica_of(s))
            others = sorted(({h for hs in (holders or {}).values() for h in hs} & engines) - {svc[s].name})
            if others:
                return halt(f"GPUs {sorted(holders or {})} of {rt.rb.replica_of(s)} are also held by {', '.join(others)}: stopping "
                            f"{s} would not free them for the new engine. Nothing was stopped; inspect the host")
        baseline = {"ids": {s: (svc[s].id if s in svc else None) for s in req.services}}
        outcome = await rt.mutate("compose_down", req, baseline)
    if outcome["status"] == "refused":
        if outcome.get("lock_held"):
            return lock_held(rt.rb.timeouts.gone, "down", req.services, outcome.get("error", ""), again=bool(resends))
        return fail(f"compose-manager did not run the down: {outcome.get('error')}")
    verdict = await rt.wait_gone(req, outcome, resends=resends)
    await rt.record_ownership(req, outcome.get("baseline", {}), up=False)
    if verdict.event.value == "ok":
        running_engines = {c.name for c in await rt.ps() if rt.rb.replica_of(c.service or c.name)}
        for s in req.services:  # and no engine holds them once it is gone
            holders = await rt.gpu_holders(rt.rb.replica_of(s))
            busy = {i: sorted(h & running_engines) for i, h in (holders or {}).items() if h & running_engines}
            if busy:
                return fail(f"{s} is gone but its GPUs are still held: " + "; ".join(f"GPU {i} by {', '.join(h)}" for i, h in busy.items()))
        rt.ctx.oneshots_removed += [s for s in req.services if s in rt.rb.oneshot_services() and s not in rt.ctx.oneshots_removed]
    return verdict
