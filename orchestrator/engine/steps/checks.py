"""`check:` preflight checks and `cache:`. They change nothing. A prerequisite (rules/prerequisites.py)
is overridden only by an approval named `prerequisite:<host>`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from orchestrator.engine.context import BeforeState, Placement
from orchestrator.engine.rules.prerequisites import unfinished, unmet_in
from orchestrator.engine.steps.base import Activities, Node, Step, StepOutcome, fail, ok, register, skip
from orchestrator.hosts.budget import GIB, check_fit, format_gib, parse_budget, per_rank_bytes
from orchestrator.language.runbook import Runbook


@dataclass(frozen=True)
class BudgetFit:
    """The budget rule's verdict on one env value (`problem` None: it passes)."""

    problem: str | None
    replica_bytes: int = 0
    rank_bytes: int = 0
    available_bytes: int = 0
    page_cache_headroom_bytes: int = 0
    ranks: Mapping[str, int] = field(default_factory=dict)  # engine -> its rank_budget_bytes
    fitted: str = ""  # "2 x 150.0 GiB + 1 x 60.0 GiB"


def _room_bytes(text: str, available: int) -> int:
    """A reserve or page-cache room in bytes; `0` (the page-cache room's default) is none."""
    return 0 if text.strip() == "0" else parse_budget(text).resolve(available)


def evaluate_budget(rb: Runbook, raw: str | None, available_ram_gib: float, source: str, host: str,
                    others: Mapping[str, str | None] | None = None) -> BudgetFit | None:
    """The HiCache budget rule (pure): the variable unset or an allowed value, and every replica's
    budget fits the host's RAM minus the reserve with the page-cache room left (None: no budget).
    Several budgets: `others` holds the rest's env values by variable; all replicas must fit
    together, under the largest reserve and page-cache room."""
    budgets = rb.budgets()
    if not budgets:
        return None
    values = [raw] + [(others or {}).get(b.variable) for b in budgets[1:]]
    avail = int(available_ram_gib * GIB)
    effective, ranks, parts = [], {}, []
    for b, value in zip(budgets, values):
        allowed = [parse_budget(a) for a in b.allowed]
        if value is not None:
            try:
                parsed = parse_budget(value)
            except ValueError:
                parsed = None
            if parsed is None or all(parsed != a for a in allowed):
                return BudgetFit(f"{b.variable} is set in the env map to a value other than {' or '.join(b.allowed)} "
                                 f"(env-map values are not shown); unset it or set it to {b.allowed[0]} in the dashboard")
        eff = parse_budget(b.default) if value is None else parse_budget(value)
        effective += [eff] * b.replicas
        parts.append(f"{b.replicas} x {format_gib(eff.resolve(avail))}")
        for e in b.engines:
            ranks[e] = per_rank_bytes(eff.resolve(avail), b.ranks_per_replica)
    first = budgets[0]
    reserve = max(_room_bytes(b.reserve, avail) for b in budgets)
    page_cache = max(_room_bytes(b.min_page_cache, avail) for b in budgets)
    report = check_fit(effective, avail, reserve, page_cache)
    rank = ranks[first.engines[0]]
    reserve_text = first.reserve if len(budgets) == 1 else format_gib(reserve) + " (the largest)"
    problem = None if report.ok else (
        f"{' + '.join(parts)} does not fit {host}'s {format_gib(avail)} available "
        f"({source}) minus the {reserve_text} reserve: " + "; ".join(report.problems))
    return BudgetFit(problem, effective[0].resolve(avail), rank, avail, report.page_cache_headroom_bytes, ranks, " + ".join(parts))


def target_needs_budget(rb: Runbook, file: str, services: list[str] | tuple[str, ...]) -> bool:
    """Whether a request is held to the budget rule: only an engine the rule names, from the runbook's
    new file (a rollback to the previous file is judged by its dry run and cold start)."""
    return file == rb.file and any(s in b.engines for b in rb.budgets() for s in services)


def expected_rank_budget(budget_ctx: dict[str, int], rb: Runbook, service: str) -> int:
    """The rank_budget_bytes `service`'s ranks must log: the budget gate's figure, else its default's."""
    got = budget_ctx.get(f"rank_budget_bytes@{service}", budget_ctx.get("rank_budget_bytes"))
    if got is not None:
        return got
    b = rb.budget_of(service)
    assert b is not None
    default = parse_budget(b.default)
    # without the budget gate's figure there is no RAM to take a percentage of: a size only
    assert default.bytes is not None, f"budget {b.variable}'s default {b.default!r} is a percentage; run check: budget first"
    return per_rank_bytes(default.bytes, b.ranks_per_replica)


def budget_verdict(rt: Activities) -> StepOutcome:
    """The budget rule on the env map as read now (also re-checked when the map changes mid-run)."""
    assert rt.env is not None
    b = rt.rb.budget
    fit = evaluate_budget(rt.rb, rt.env.get(b.variable) if b else None, rt.entry.available_ram_gib,
                          rt.entry.available_ram_source, rt.run.host,
                          {m.variable: rt.env.get(m.variable) for m in rt.rb.more_budgets})
    if fit is None or b is None:
        return ok("no HiCache host-RAM budget in this runbook")
    if fit.replica_bytes:
        rt.ctx.budget = {"replica_bytes": fit.replica_bytes, "rank_budget_bytes": fit.rank_bytes,
                         **({f"rank_budget_bytes@{e}": r for e, r in fit.ranks.items()} if rt.rb.more_budgets else {})}
    if fit.problem:
        return fail(fit.problem)
    rt.ctx.budget_env_fingerprint = rt.env.fingerprint()
    if rt.rb.more_budgets:
        ranks = ", ".join(f"{e} {r}" for e, r in fit.ranks.items())
        return ok(f"{fit.fitted} fits in {format_gib(fit.available_bytes)} minus the largest reserve, leaving "
                  f"{format_gib(fit.page_cache_headroom_bytes)} for page cache; each engine's ranks must log its "
                  f"rank_budget_bytes ({ranks})")
    return ok(
        f"{b.replicas} x {format_gib(fit.replica_bytes)} fits in {format_gib(fit.available_bytes)} minus {b.reserve}, "
        f"leaving {format_gib(fit.page_cache_headroom_bytes)} for page cache; every rank must log rank_budget_bytes={fit.rank_bytes}"
    )


@register("check.env_map")
async def env_map_check(rt: Activities, node: Node, step: Step) -> StepOutcome:
    env = await rt.read_env()
    masked = env.masked_credentials(secret_keys=rt.entry.secret_keys)
    if masked:
        return fail(
            f"the env map of {rt.entry.instance_name} holds masked or placeholder values for {', '.join(masked)} "
            f"(copied from a redacted view?): deploying it would break the host; fix them in the dashboard"
        )
    return ok(f"read the env map of {rt.entry.instance_name}: {len(env)} keys (values are never shown)")


@register("check.budget")
async def budget_check(rt: Activities, node: Node, step: Step) -> StepOutcome:
    await rt.ensure_env()
    return budget_verdict(rt)


@register("check.rollback_targets")
@register("check.before_state")
async def before_state_check(rt: Activities, node: Node, step: Step) -> StepOutcome:
    """Record /version and docker/ps, establish and dry-run-check every rollback target before anything
    is stopped; `before_state` adds gpu02's peer and completion checks."""
    await rt.ensure_env()
    before = BeforeState(version=await rt.version_summary())
    before.ps = {c.name: {"id": c.id, "state": c.state, "status": c.status} for c in await rt.ps()}
    missing = await rt.establish_previous()
    if missing:
        return fail(
            "cannot establish the previous successful deploy (tag and file) of " + ", ".join(missing)
            + ": without a rollback target the rollout does not start"
        )
    refused = await rt.validate_previous_targets()
    if refused is not None:
        return refused
    problems: list[str] = []
    comp: dict[str, Any] = {"ok": True}
    if step.check == "before_state":
        before.peers, problems = await rt.peer_presence()
        before.completion = comp = await rt.completion_once()
    rt.ctx.before = before
    if problems:
        return fail("before-state: " + "; ".join(problems) + " (the host must be healthy before a rollout starts)")
    if not comp.get("ok"):
        return fail(f"before-state: a long-domain completion failed ({comp.get('reason')}); the host must serve before a "
                    f"rollout starts")
    prev = ", ".join(f"{s} <- {v['file']}@{v['tag']}" for s, v in rt.ctx.previous.items())
    return ok(f"{'before-state' if step.check == 'before_state' else 'rollback targets'} recorded; previous deploys: {prev}")


@register("check.host_state")
async def host_state_check(rt: Activities, node: Node, step: Step) -> StepOutcome:
    """Place the host in the runbook's host states: before -> OK; at target -> SKIP to DONE; part-way
    -> OK only with `--continue` at that state's phase; unrecognised -> FAIL with the nearest state."""
    from orchestrator.engine.rules import host_state

    observed = await rt.observe_host()
    if isinstance(observed, StepOutcome):
        return observed
    state = host_state.place(rt.rb, observed)
    rt.ctx.placement = placement = Placement(observed=dict(observed), state=state.name if state else None)
    first = rt.rb.phases[0].name
    wanted = rt.ctx.start_phase
    if state is None:
        near = host_state.nearest(rt.rb, observed)
        diff = f"; nearest is {near[0].name} ({near[0].say}): " + "; ".join(near[1]) if near else ""
        return fail(f"{rt.run.host} is in a state this runbook does not recognise ({host_state.describe(observed)}){diff}. "
                    f"Nothing was changed")
    verdicts = await rt.running_engine_verdicts()
    placement.serving = {svc: v.state.value for svc, v in verdicts.items()}
    serving_note = "; ".join(f"{svc} {v.phrase()}" for svc, v in verdicts.items())
    if state.action == "done":
        down = [f"{svc} {v.phrase()}" for svc, v in verdicts.items() if v.not_serving]
        if down:  # the target is in place but not serving: "nothing to do" would be untrue
            return fail(f"{rt.run.host} already runs the target ({state.say}), but {'; '.join(down)}. Nothing was "
                        f"changed; look at the host (a rollout has nothing to deploy here)")
        for _, other in unfinished(rt.journal, [rt.run.host], but=rt.run.run_id):
            # the target is in place, but that run's remaining gates (its soak, its approval)
            # never passed: "nothing to do" must not stand in for them
            return fail(f"{rt.run.host} already runs the target, but run {other.run_id} ({other.kind}) stopped at "
                        f"{other.state} before it ended: `orchestrate resume {other.run_id}` finishes it (its soak "
                        f"and approval). Nothing was changed")
        return skip(f"{rt.run.host} already runs the target ({state.say}): nothing to do"
                    + (f" (engines: {serving_note})" if any(not v.serving for v in verdicts.values()) else ""))
    target = first if state.action == "start" else state.action
    foreign = await rt.foreign_in_flight()  # someone else is acting on the host right now
    if not foreign and state.action != "start":
        foreign = await rt.foreign_part_way()  # never continue a rollout another process drives
    if foreign:
        return fail(foreign)
    if (wanted or first) == target:
        return ok(f"{rt.run.host} is in state {state.name} ({state.say}): the procedure runs from phase {target}"
                  + (f"; engines: {serving_note}" if serving_note else ""))
    if state.action == "start":
        return fail(f"{rt.run.host} is in state {state.name} ({state.say}): start from the beginning, without --continue")
    return fail(
        f"{rt.run.host} is part-way: {state.name} ({state.say}). Nothing was changed. To continue from phase {target}, "
        f"run `orchestrate rollout {rt.run.host} --tag {rt.run.tag} --continue`"
    )


@register("check.tag_age")
async def tag_age_check(rt: Activities, node: Node, step: Step) -> StepOutcome:
    """The tag is merged to main and old enough (compose-manager's own age gate is off in production)."""
    verdict = await rt.check_tag_age()
    if verdict is None:
        return ok("tag age not checked: --skip-tag-age-check")
    good, text = verdict
    return ok(text) if good else fail(text)


@register("check.model_cache")
async def model_cache_check(rt: Activities, node: Node, step: Step) -> StepOutcome:
    """Missing weights are a warning, not a failure: the cold start then includes a download."""
    cache = await rt.host_cache()
    if cache is None:
        return ok("compose-manager does not offer GET /host/cache here: the model cache was not checked")
    missing = [w for w in rt.rb.weights if not cache.holds(w)]
    if missing:
        rt.emit("note", text=f"the host's model cache does not hold {', '.join(missing)}: the cold start includes a download")
        return ok(f"model cache: {', '.join(missing)} NOT cached (the cold start includes a download)")
    return ok(f"model cache holds {', '.join(rt.rb.weights) or 'nothing the runbook names'}")


@register("cache")
async def cache_holds(rt: Activities, node: Node, step: Step) -> StepOutcome:
    assert step.cache is not None
    cache = await rt.host_cache()
    if cache is None:
        rt.emit("note", text="GET /host/cache did not answer: the model cache was not checked")
        return ok("GET /host/cache did not answer: the model cache was not checked")
    missing = [w for w in step.cache.holds if not cache.holds(w)]
    if missing:
        return fail(f"the model cache does not hold {', '.join(missing)} (it holds {', '.join(cache.weights) or 'nothing'}): "
                    f"the pre-stage did not fetch it; nothing was changed")
    return ok(f"the model cache holds {', '.join(step.cache.holds)}")


@register("check.prerequisites")
async def prerequisites(rt: Activities, node: Node, step: Step) -> StepOutcome:
    overrides = [g.split(":", 1)[1] for g in rt.approvals() if g.startswith("prerequisite:")]
    problems = unmet_in(rt.journal, rt.rb.prerequisites, datetime.now(UTC), overrides)
    if problems:
        return fail("prerequisite not met: " + "; ".join(problems))
    return ok("prerequisites met" + (f" (overridden by name: {', '.join(overrides)})" if overrides else ""))
