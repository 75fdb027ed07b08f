"""`orchestrate plan HOST --tag T --live`: the offline plan, filled in from the host, read-only.

It reads what a rollout's preflight would: the env map (keys only ever shown), its budget rule, the
host's place among `host_states` (docker/ps + a dry run of the new file), every rollback target
(compose-manager's success record + the action log, or the journaled run a `--continue` keeps), the
GPU claims and model cache where offered, and every dry run plannable from the current state. The
verdict: would start (exit 0), nothing to do (exit 0) or would refuse (exit 5), and why.

Rules, and why:

- Nothing mutating is ever sent: `_ReadOnlyCompose` has no `down` and raises on an `up` without
  `dry_run: true`. docker/ps is compared around each dry run (docker/compose#14029); a change stops
  every further dry run and refuses.
- A phase's dry runs are planned from the host as it is now, so what the phase's own earlier `down`
  steps would stop is not held against them (the old r2 still running is planned as an orphan).
  Any other removal, an unexpected change or an unreadable line refuses, as the executor would.
- Placement and budget follow the executor's rules (`host_state.place/nearest`, `checks.evaluate_budget`).
- GPU claims and the model cache only warn: the runbook's plan allows the model-downloader, and GPU
  ownership is the containers' business.
"""

from __future__ import annotations

import json
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from typing import Any

from orchestrator.engine.rules import host_state
from orchestrator.engine.rules.dry_run_check import judge_dry_run
from orchestrator.engine.rules.targets import group_targets, journaled_successes, newest_successful, recorded_successes
from orchestrator.engine.steps.checks import evaluate_budget
from orchestrator.hosts.budget import format_gib
from orchestrator.hosts.clients.compose_manager import ComposeManagerClient, ComposeRequest, StreamOutcome
from orchestrator.hosts.clients.dashboard import DashboardClient
from orchestrator.hosts.clients.errors import BadRequest, ClientError, TagNotFound, TagTooRecent
from orchestrator.hosts.envmap import EnvMap
from orchestrator.hosts.parsers.dry_run import parse_dry_run
from orchestrator.language.machine import compile_rollout
from orchestrator.language.runbook import SELECTED, Runbook, Step, load_runbook
from orchestrator.previews.plan import Plan, build_plan, render_markdown, render_text
from orchestrator.util.exit_codes import ExitCode
from orchestrator.util.user_errors import UserError

WOULD_START = "would start"
NOTHING_TO_DO = "nothing to do"
WOULD_REFUSE = "would refuse"


class MutationRefused(RuntimeError):
    """A code path of the live plan tried to send a mutating call: a bug, never sent."""


class _ReadOnlyCompose:
    """The compose-manager client with its mutating half removed: reads, and dry runs only."""

    _READS = frozenset({"ps", "version", "action_log", "host_gpu", "host_cache"})

    def __init__(self, cm: ComposeManagerClient) -> None:
        self._cm = cm

    def __getattr__(self, name: str) -> Any:
        if name not in self._READS:  # `down`, and anything else that is not a read: not there
            raise AttributeError(name)
        return getattr(self._cm, name)

    async def up(self, req: ComposeRequest, env: EnvMap) -> StreamOutcome:
        if req.dry_run is not True:
            raise MutationRefused("plan --live sends dry runs only")
        return await self._cm.up(req, env)


@dataclass
class DryRunReport:
    purpose: str
    request: dict[str, Any]
    status: str
    verdict: str  # ok | refuse | skip
    note: str
    planned: dict[str, str] = field(default_factory=dict)


@dataclass
class LivePlan:
    plan: Plan
    env_keys: list[str] = field(default_factory=list)
    budget: str = ""
    observed: dict[str, str] = field(default_factory=dict)
    state: str | None = None
    state_say: str = ""
    nearest: str | None = None
    diff: list[str] = field(default_factory=list)
    start_phase: str | None = None
    previous: dict[str, dict[str, str]] = field(default_factory=dict)
    previous_source: str = ""
    gpus: list[str] | None = None
    cache: list[str] | None = None
    dry_runs: list[DryRunReport] = field(default_factory=list)
    verdict: str = WOULD_START
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: containers a dry run (or someone else, meanwhile) changed: the preview then never says
    #: "nothing was changed"
    changed: list[str] = field(default_factory=list)

    def refuse(self, reason: str) -> None:
        self.verdict = WOULD_REFUSE
        self.reasons.append(reason)

    @property
    def exit_code(self) -> int:
        if self.changed:  # the host is no longer as it was read: as for a halted run, a human looks first
            return int(ExitCode.HALTED)
        return int(ExitCode.ABORTED if self.verdict == WOULD_REFUSE else ExitCode.DONE)

    @property
    def verdict_line(self) -> str:
        why = "; ".join(self.reasons) if self.reasons else (
            f"{self.plan.host} is in state {self.state} ({self.state_say})" if self.state else "")
        return f"verdict: {self.verdict}" + (f": {why}" if why else "")


# -- the rules -------------------------------------------------------------------------------------

def budget_rule(rb: Runbook, raw: str | None, available_ram_gib: float, source: str, host: str,
                others: dict[str, str | None] | None = None) -> tuple[bool, str]:
    """The preflight's budget rule (`steps.checks.evaluate_budget`), worded for the preview."""
    fit = evaluate_budget(rb, raw, available_ram_gib, source, host, others)
    if fit is None:
        return True, "none (no HiCache host-RAM budget in this runbook)"
    if fit.problem:
        return False, fit.problem
    b = rb.budget
    assert b is not None
    if rb.more_budgets:  # several budgets: every engine's own rank budget
        return True, (f"{fit.fitted} fit in {format_gib(fit.available_bytes)} minus the largest reserve, leaving {format_gib(fit.page_cache_headroom_bytes)} "
                      "for page cache; rank_budget_bytes " + ", ".join(f"{e}={r}" for e, r in fit.ranks.items()))
    where = "unset, the file's default" if raw is None else "set in the env map to an allowed value"
    return True, (f"{b.variable} {where}: {b.replicas} x {format_gib(fit.replica_bytes)} fits in {format_gib(fit.available_bytes)} "
                  f"minus {b.reserve}, leaving {format_gib(fit.page_cache_headroom_bytes)} for page cache; "
                  f"rank_budget_bytes={fit.rank_bytes}")


def phase_dry_run_steps(rb: Runbook, phase: str) -> list[tuple[Step, set[str]]]:
    """The dry runs of `phase` that can be planned from the host as it is now: each with the
    services the phase's earlier `down` steps (of the new file or a previous one) stop first.
    A `services: selected` dry run depends on the one before it and is left out."""
    out: list[tuple[Step, set[str]]] = []
    stopped: set[str] = set()
    for st in rb.phase(phase).steps:  # a forward phase (its name comes first in rb.phase's search)
        if st.down is not None and isinstance(st.down.services, list):
            stopped |= set(st.down.services)
        if st.dry_run is not None and st.plan is not None and st.dry_run.file == "new" \
                and st.dry_run.services != SELECTED and not st.plan.tag_only:
            out.append((st, set(stopped)))
    return out


async def _resolve_previous(session: Any, cm: _ReadOnlyCompose, host: str, project: str | None, rb: Runbook,
                            tag: str, continuing: bool) -> tuple[dict[str, dict[str, str]], str]:
    """As the executor's preflight establishes them (`Runtime.establish_previous`): a continued
    rollout keeps the targets of the journaled run at this tag that started it (`new_rollout`);
    every other service: the newest `compose_up` in the action log naming it whose (tag, file)
    compose-manager's success record (`/version` current/previous) or this journal saw succeed."""
    previous: dict[str, dict[str, str]] = {}
    source = ""
    if continuing:
        from orchestrator.engine.context import RunContext

        for earlier in session.journal.list_runs(host, limit=50):
            prev = RunContext.from_json(earlier.context).previous
            if earlier.kind == "rollout" and earlier.tag == tag and prev:
                previous, source = dict(prev), f"run {earlier.run_id} (kept by --continue)"
                break
    wanted = [s for s in rb.previous_refs() if s not in previous]
    if not wanted:
        return previous, source
    actions = await cm.action_log()
    succeeded = journaled_successes(session.journal, host)
    with suppress(ClientError):
        succeeded |= recorded_successes((await cm.version()).project(project))
    for service in wanted:
        act = newest_successful(actions, service, succeeded)
        if act is not None:
            previous[service] = {"tag": act.tag or "", "file": act.file or "", "commit": act.commit or ""}
    found = "the action log, checked against compose-manager's success record and the journal"
    return previous, (f"{source}; the rest from {found}" if source else found)


# -- the read-only run -----------------------------------------------------------------------------

async def build_live_plan(session: Any, host: str, tag: str, runbook: str, *,
                          new_file_services: set[str] | None = None) -> LivePlan:
    """Read the host (never change it) and judge what `rollout HOST --tag TAG` would do."""
    from orchestrator.engine.executor.placement import PlacementError, observe_host
    from orchestrator.service.run_info import check_tag
    from orchestrator.service.session import _compose_client

    check_tag(tag)
    entry = session.inventory.host(host)
    rb = load_runbook(runbook)
    if host not in rb.hosts:
        raise UserError(f"runbook {rb.name} is written for {', '.join(rb.hosts)}, not {host}")
    table = compile_rollout(rb)
    lp = LivePlan(plan=build_plan(rb, table, host=host, tag=tag, project=entry.project, new_file_services=new_file_services))

    async with DashboardClient(str(session.inventory.dashboard_url).rstrip("/"), session.settings.dashboard_token,
                               transport=session.transport, retry=session.retry, clock=session.clock) as dash:
        env = await dash.env_map(name=entry.instance_name)
    session.redactor.add(*env.redaction_values(secret_keys=entry.secret_keys,
                                               identifiers=(host, entry.instance_name, tag, *rb.identifiers())))
    lp.env_keys = sorted(env)
    masked = env.masked_credentials(secret_keys=entry.secret_keys)
    if masked:
        lp.refuse(f"the env map of {entry.instance_name} holds masked or placeholder values for {', '.join(masked)}: fix them in the dashboard")
    good, lp.budget = budget_rule(rb, env.get(rb.budget.variable) if rb.budget else None, entry.available_ram_gib,
                                  entry.available_ram_source, host, {m.variable: env.get(m.variable) for m in rb.more_budgets})
    if not good:
        lp.refuse(lp.budget)

    async with _compose_client(session, entry) as raw_cm:
        cm = _ReadOnlyCompose(raw_cm)
        scrub = session.redactor.scrub

        def record(purpose: str, req: ComposeRequest, out: StreamOutcome, verdict: str, note: str,
                   planned: dict[str, str] | None = None) -> None:
            lp.dry_runs.append(DryRunReport(purpose, req.redacted(len(env)), out.status, verdict, scrub(note), dict(planned or {})))

        dry_runs_ok = not masked
        observed: dict[str, str] | None = None
        if dry_runs_ok:
            try:
                observed = await observe_host(cm, env, rb, tag, entry.project,
                                              on_dry_run=lambda req, out: record("placement (host_states)", req, out,
                                                                                 "ok" if out.status == "success" else "refuse",
                                                                                 f"dry run {out.status}"))
            except PlacementError as exc:
                lp.refuse(f"cannot place {host} in the runbook: {scrub(str(exc))}")
                dry_runs_ok = not exc.changed
                if exc.changed:
                    lp.changed.append(scrub(str(exc)))
        state = None
        if observed is not None:
            lp.observed = dict(observed)
            state = host_state.place(rb, observed)
            if state is None:
                near = host_state.nearest(rb, observed)
                if near:
                    lp.nearest, lp.diff = near[0].name, list(near[1])
                lp.refuse(f"{host} is in a state this runbook does not recognise ({host_state.describe(observed)})"
                          + (f"; nearest is {near[0].name} ({near[0].say}): " + "; ".join(near[1]) if near else ""))
            else:
                lp.state, lp.state_say = state.name, state.say
                if state.action == "done":
                    if lp.verdict != WOULD_REFUSE:
                        lp.verdict = NOTHING_TO_DO
                        lp.reasons.append(f"{host} already runs the target ({state.say})")
                elif state.action == "start":
                    lp.start_phase = rb.phases[0].name
                else:
                    from orchestrator.engine.rules.foreign_change import refuse_foreign_part_way

                    lp.start_phase = state.action
                    foreign = refuse_foreign_part_way(session.journal, host, await cm.action_log(), rb.file, tag,
                                                      scrub(session.settings.journal_location()))
                    if foreign:  # someone else's rollout: never "run --continue"
                        lp.refuse(foreign)
                    else:
                        lp.refuse(f"{host} is part-way: {state.name} ({state.say}); to continue from phase {state.action}, "
                                  f"run `orchestrate rollout {host} --tag {tag} --continue`")

        continuing = state is not None and state.action not in ("start", "done")
        lp.previous, lp.previous_source = await _resolve_previous(session, cm, host, entry.project, rb, tag, continuing)
        missing = [s for s in rb.previous_refs() if s not in lp.previous]
        if missing and state is not None and state.action != "done":
            lp.refuse("cannot establish the previous successful deploy (tag and file) of " + ", ".join(missing)
                      + ": without a rollback target the rollout does not start")

        # the dry runs a rollout (or its --continue) would plan from here, preflight first
        if dry_runs_ok and lp.start_phase is not None:
            def dry(t: str, f: str, services: Any, **kw: Any) -> ComposeRequest:
                return ComposeRequest(tag=t, file=f, services=tuple(services), project=entry.project, dry_run=True, **kw)

            def not_sent(purpose: str, req: ComposeRequest, note: str) -> None:
                lp.dry_runs.append(DryRunReport(purpose, req.redacted(len(env)), "not sent", "skip", note))

            plans: list[tuple[str, ComposeRequest, Step | None, set[str]]] = [
                (f"preflight {st.id}", dry(tag, rb.file, st.dry_run.services), None, set())
                for st in rb.preflight if st.dry_run is not None and st.dry_run.services != SELECTED]
            plans += [("rollback target", dry(t, f, services), None, set())
                      for (t, f), services in group_targets(rb, lp.previous).items()]
            for st, stopped in phase_dry_run_steps(rb, lp.start_phase):
                purpose = f"phase {lp.start_phase} {st.id}"
                if st.dry_run.force_recreate:
                    # a forced recreate is always "needed": its dry run is the likeliest to be made real
                    # (docker/compose#14029), and this preview changes nothing. The run checks it.
                    not_sent(purpose, dry(tag, rb.file, st.dry_run.services, force_recreate=True),
                             f"not dry-run: a forced recreate of {', '.join(st.dry_run.services)} (only inline configs "
                             f"content changed, docker/compose#11900) would be made real by docker/compose#14029; the "
                             f"rollout dry-runs it before its up")
                    continue
                plans.append((purpose, dry(tag, rb.file, st.dry_run.services), st, stopped))
            from orchestrator.hosts.ps_compare import split_by_definition

            actions = await cm.action_log()
            for purpose, req, st, stopped in plans:
                # never a dry run that plans a recreate (docker/compose#14029 performs it): what runs
                # another definition now is checked by the step's own dry run, when the run gets there
                running = {(c.service or c.name): c for c in await cm.ps(entry.project) if c.state in ("running", "restarting")}
                safe, held = split_by_definition(list(req.services), running, req.tag, req.file, actions, engines=set(rb.engines()))
                if held:
                    not_sent(purpose, req, f"not dry-run: {', '.join(held)} runs now (an engine, or another definition, "
                                           f"which a dry run could recreate for real: docker/compose#14029); the step's own "
                                           f"dry run checks it when the run gets there")
                    if st is not None or not safe:
                        continue
                    req = dry(req.tag, req.file, safe)
                if not await _planned_dry_run(cm, env, entry.project, purpose, req, st, stopped, lp, record, rb.oneshot_services()):
                    break

        try:
            gpus = await cm.host_gpu()
            known = set(host_state.observed_services(rb)) | set(rb.engines())
            lp.gpus = []
            for g in gpus:
                lp.gpus.append(f"GPU {g.index}: " + (", ".join(g.claimed_by) or "free")
                               + (f" ({g.memory_used_mb}/{g.memory_total_mb} MiB)" if g.memory_total_mb else ""))
                strangers = [c for c in g.claimed_by if c not in known]
                if strangers:
                    lp.warnings.append(f"GPU {g.index} is claimed by {', '.join(strangers)}, which this runbook does not name")
        except BadRequest as exc:
            if exc.status not in (404, 405):
                raise
        try:
            cache = await cm.host_cache()
            lp.cache = [f"{w}: {'held' if cache.holds(w) else 'NOT held'}" for w in rb.weights] or \
                       ["the runbook names no weights (`weights:`): not checked"]
            absent = [w for w in rb.weights if not cache.holds(w)]
            if absent and lp.start_phase is not None:
                lp.warnings.append(f"the model cache does not hold {', '.join(absent)}: the model-downloader fetches it before the "
                                   f"first cold start, which then takes longer")
        except BadRequest as exc:
            if exc.status not in (404, 405):
                raise

    # the offline plan's placeholders filled: the previous deploys established, the env map's key count
    lp.plan = build_plan(rb, table, host=host, tag=tag, project=entry.project, new_file_services=new_file_services,
                         previous=lp.previous, env_keys=len(env))
    return lp


async def _planned_dry_run(cm: _ReadOnlyCompose, env: EnvMap, project: str | None, purpose: str, req: ComposeRequest,
                           step: Step | None, stopped: set[str], lp: LivePlan, record: Any, oneshots: set[str]) -> bool:
    """One dry run, docker/ps compared around it, judged like its step would be. False: stop
    sending dry runs (docker/ps changed)."""
    from orchestrator.engine.rules.foreign_change import describe_action
    from orchestrator.hosts.ps_compare import compare_ps, describe_changes

    n_actions = len(await cm.action_log())
    before = await cm.ps(project)
    try:
        out = await cm.up(req, env)
    except (TagTooRecent, TagNotFound, BadRequest) as exc:
        note = f"compose-manager refused {req.file}@{req.tag}: {exc}"
        lp.dry_runs.append(DryRunReport(purpose, req.redacted(len(env)), "refused", "refuse", note))
        lp.refuse(f"{purpose}: {note}")
        return True
    after = await cm.ps(project)
    changes = compare_ps(before, after, oneshots)
    if changes:
        named = describe_changes(changes)
        later = (await cm.action_log())[n_actions:]
        why = (f"compose-manager's action log records {describe_action(later[0])} meanwhile (someone else is acting on the host)"
               if later else "docker/compose#14029: the dry run recreated for real")
        lp.changed.append(f"{purpose}: {named}")
        record(purpose, req, out, "refuse", f"docker/ps changed across the dry run: {named} ({why})")
        lp.refuse(f"{purpose}: the dry run of {', '.join(req.services)} changed real containers: {named} ({why}); "
                  f"inspect the host; no more dry runs were sent")
        return False
    if out.status != "success":
        note = f"the dry run did not succeed ({out.status}): " + " | ".join(out.lines[-2:])
        record(purpose, req, out, "refuse", note)
        lp.refuse(f"{purpose}: {note}")
        return True
    plan = parse_dry_run(out.lines, project=project)
    planned = dict(plan.actions)
    if step is None:
        removed = sorted(s for s, a in planned.items() if a == "removed")
        note = "accepted" + (f"; planned from the current state it would remove {', '.join(removed)}" if removed else "")
        record(purpose, req, out, "ok", note, planned)
        return True
    # what the phase's earlier downs stop is not held against the plan
    for svc in stopped:
        if plan.actions.get(svc) == "removed":
            del plan.actions[svc]
    sp = step.plan
    assert sp is not None
    listed = list(req.services) if sp.change == SELECTED else list(sp.change or req.services)
    j = judge_dry_run(plan, listed, may_also=sp.may_also, allow_unchanged=sp.allow_unchanged)
    note = j.reason + (f" (not counted: the removal of {', '.join(sorted(stopped & set(planned)))}, stopped earlier in the phase)"
                       if stopped & {s for s, a in planned.items() if a == 'removed'} else "")
    verdict = {"apply": "ok", "skip": "skip", "refuse": "refuse"}[j.verdict]
    record(purpose, req, out, verdict, note, planned)
    if j.verdict == "refuse":
        lp.refuse(f"{purpose}: dry run of {', '.join(req.services)} from {req.file}@{req.tag}: {j.reason}")
    return True


# -- rendering -------------------------------------------------------------------------------------

def _live_sections(lp: LivePlan) -> list[tuple[str, list[str]]]:
    prev = [f"{s} <- {v['file']}@{v['tag']}" for s, v in lp.previous.items()] or ["none established"]
    place = [f"observed: {host_state.describe(lp.observed) or '(not observed)'}"]
    if lp.state:
        place.append(f"state: {lp.state} ({lp.state_say})" + (f"; the procedure runs from phase {lp.start_phase}" if lp.start_phase else ""))
    elif lp.nearest:
        place.append(f"state: unknown; nearest is {lp.nearest}: " + "; ".join(lp.diff))
    dry = [f"{d.purpose}: {d.verdict} - {d.note}  [{d.request['file']}@{d.request['tag']} {', '.join(d.request['services'])}]"
           for d in lp.dry_runs] or ["none sent"]
    return [
        ("Env map", [f"{len(lp.env_keys)} keys (values are never shown): {', '.join(lp.env_keys)}"]),
        ("Budget", [lp.budget]),
        ("Host state", place),
        ("Rollback targets", [*prev, f"source: {lp.previous_source}"]),
        ("GPU claims", lp.gpus if lp.gpus is not None else ["not offered by this compose-manager"]),
        ("Model cache", lp.cache if lp.cache is not None else ["not offered by this compose-manager"]),
        ("Dry runs (docker/ps compared around each)", dry),
        ("Warnings", lp.warnings or ["none"]),
    ]


def render_live_text(lp: LivePlan) -> str:
    head = ("== Live (read from the host; nothing was changed)" if not lp.changed else
            "== Live (read from the host; CONTAINERS CHANGED during the preview: " + "; ".join(lp.changed) + ")")
    out = [render_text(lp.plan).rstrip("\n"), "", head]
    for title, lines in _live_sections(lp):
        out.append(f"{title}:")
        out += [f"    {ln}" for ln in lines]
    out.append(lp.verdict_line)
    return "\n".join(out) + "\n"


def render_live_markdown(lp: LivePlan) -> str:
    mark = {WOULD_START: "✅", NOTHING_TO_DO: "✅", WOULD_REFUSE: "⛔"}[lp.verdict]
    out = [f"**{mark} {lp.verdict_line}**", "", render_markdown(lp.plan).rstrip("\n"), ""]
    if lp.changed:
        out[1:1] = ["", "**CONTAINERS CHANGED during the preview: " + "; ".join(lp.changed) + "**"]
    for title, lines in _live_sections(lp):
        out += ["<details>", f"<summary>{title}</summary>", ""] + [f"- {ln}" for ln in lines] + ["", "</details>", ""]
    return "\n".join(out)


def render_live_json(lp: LivePlan) -> str:
    d = asdict(lp)
    d["verdict_line"] = lp.verdict_line
    d["exit_code"] = lp.exit_code
    return json.dumps(d, indent=2)
