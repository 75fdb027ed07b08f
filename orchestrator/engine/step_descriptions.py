"""What `plan` says of each step: the gate checked after it, and a precondition if any. One function
per step kind (`DESCRIPTIONS`, keyed as the handlers are; made of `_TEXTS` but the dry run's), read by
`plan` without loading the handlers; `register` refuses a handler without one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.hosts.budget import parse_budget, per_rank_bytes
from orchestrator.language import step_specs
from orchestrator.util.durations import format_duration

if TYPE_CHECKING:
    from orchestrator.language.runbook import GaugeBound, LogValue, Runbook, Step


@dataclass(frozen=True)
class Description:
    gate: str
    precondition: str | None = None


def handler_key(step: Step) -> str:
    return f"check.{step.check}" if step.kind == "check" else step.kind


def bound_text(g: GaugeBound) -> str:
    if g.min is not None and g.max is not None:
        rng = f"{g.min:g} <= {g.name} <= {g.max:g}"
    elif g.max is not None:
        rng = f"{g.name} <= {g.max:g}"
    else:
        rng = f"{g.name} >= {g.min:g}"
    return rng + (f" within {format_duration(g.within)}" if g.within else "")


def value_text(v: LogValue) -> str:
    if v.equals is not None:
        bound = f"= {v.equals:g}" + (f" +/- {v.tolerance:g}" if v.tolerance else "")
    else:
        bound = " and ".join(x for x in (f">= {v.min:g}" if v.min is not None else "", f"<= {v.max:g}" if v.max is not None else "") if x)
    return f"/{v.pattern}/ {bound} on every line (at least {v.at_least})"


def manual_plan_lines(table: Any) -> list[str]:
    """`plan`'s up-front list: every manual edit, and which rollback needs one."""
    lines = []
    for sid in table.order:
        node = table.nodes[sid]
        if node.step is None or node.step.manual is None:
            continue
        where = {"rollback": f"the rollback of phase {node.phase}", "full_rollback": "the whole-host rollback"}.get(
            node.section, f"phase {node.phase}" if node.phase else node.section)
        lines.append(f"{where} needs a human's edit at {sid}: {node.step.manual.edit}")
    return lines


def describe_step(step: Step, rb: Runbook) -> Description:
    try:
        describe = DESCRIPTIONS[handler_key(step)]
    except KeyError:
        raise LookupError(f"no handler for step kind {handler_key(step)!r}") from None
    return describe(step, rb)


def _budget(_: None, rb: Runbook) -> str:
    bs = rb.budgets()
    if len(bs) > 1:
        return ("; ".join(f"{b.variable} unset or {' / '.join(b.allowed)} ({', '.join(b.engines)})" for b in bs)
                + "; together " + " + ".join(f"{b.replicas} x {b.default}" for b in bs)
                + f" fit in available RAM minus the largest reserve ({' / '.join(b.reserve for b in bs)}) "
                f"with at least the largest page-cache room ({' / '.join(b.min_page_cache for b in bs)})")
    b = rb.budget
    assert b is not None  # the loader refuses a budget check without the runbook's budget: block
    return (f"{b.variable} unset or {' / '.join(b.allowed)}; {b.replicas} x {b.default} "
            f"fits in available RAM minus {b.reserve} with at least {b.min_page_cache} for page cache")


def _dry_run(step: Step, rb: Runbook) -> Description:
    p = step.plan
    assert p is not None
    if p.tag_only:
        return Description("compose-manager accepts the tag and the file (not too recent, known); docker/ps unchanged across the dry run")
    change = "the services the previous dry run selected" if p.change == step_specs.SELECTED else ", ".join(p.change)
    extra = f" (plus {', '.join(p.may_also)})" if p.may_also else ""
    skip_ = "; if all are already current the up is skipped" if p.allow_unchanged else ""
    spec = step.dry_run
    if spec is not None and spec.force_recreate and isinstance(spec.services, list):
        skip_ += (f"; force_recreate scoped to {', '.join(spec.services)}, whose only change is inline configs content "
                  f"(compose would report it unchanged and keep the old config: docker/compose#11900)")
    return Description(f"docker/ps unchanged across the dry run (docker/compose#14029); the plan creates or recreates only {change}{extra}, "
                       f"removes nothing and has no line we do not understand{skip_}")


def _down(down: step_specs.ComposeSpec, rb: Runbook) -> Description:
    t = rb.timeouts
    engines = [s for s in down.services if rb.replica_of(s)] if isinstance(down.services, list) else []
    pre = None
    if engines:
        unless = ("once both model-proxy peers no longer list the host under any domain (drained)" if rb.capacity == "fleet"
                  else "an engine of another replica serves (ready, not restarted since)")
        pre = f"{', '.join(engines)} is stopped only if it does not serve, or {unless}; else the run halts with the host untouched"
    return Description(f"docker/ps no longer lists {', '.join(down.services)} within {format_duration(t.gone)} "
                       f"(a zombie or a down without effect is sent again after observation, at most twice)", pre)


def _cold_start(lg: step_specs.LogsSpec, rb: Runbook) -> str:
    t = rb.timeouts
    if lg.budget:
        b = rb.budget_of(lg.service)
        assert b is not None  # the loader refuses `logs: {budget: true}` without the runbook's budget: block
        replica_bytes = parse_budget(b.default).bytes
        assert replica_bytes is not None  # the budget rule takes a size, never a percentage
        rank = per_rank_bytes(replica_bytes, b.ranks_per_replica)
        milestones = [p.replace("{rank_budget_bytes}", str(rank)) if "{rank_budget_bytes}" in p else repr(p)
                      for p in rb.log_gates.required_per_rank]
        budget_required = any("{rank_budget_bytes}" in p for p in rb.log_gates.required_per_rank)
        head = (f"every rank TP0-TP{rb.ranks_of(lg) - 1} logs {' and '.join(milestones)}, then the ready line" if milestones
                else "the ready line")
        wrong = "" if budget_required else (f"; a rank logging rank_budget_bytes other than {rank} fails it "
                                            f"(no rank is required to log it)")
        return (f"{head}, within {format_duration(t.cold_start)}{wrong}; none of {', '.join(rb.log_gates.forbidden)}; "
                f"no restart")
    return (f"the ready line within {format_duration(t.cold_start)}; none of the failure lines; no restart "
            f"(skipped if the dry run found it already serving)")


def _verify(v: step_specs.VerifySpec, rb: Runbook) -> str:
    parts = []
    if v.peers:
        parts.append(f"both model-proxy peers list the host healthy under {rb.domains.long} and not under {rb.domains.base} within "
                     f"{format_duration(rb.timeouts.discovery)}")
    if v.completion:
        parts.append("a completion, then a follow-up with cached_tokens > 0"
                     + (f" (up to {v.attempts} tries: the follow-up may land on another engine)" if v.attempts > 1 else ""))
    return "; ".join(parts)


def _soak(s: step_specs.SoakSpec, rb: Runbook) -> str:
    watch = "a restart, an engine gone" + (f", a forbidden log line ({', '.join(rb.log_gates.forbidden)})"
                                           if s.watch_logs and rb.log_gates.forbidden else "")
    for m in s.metrics:
        watch += f", {'; '.join(bound_text(g) for g in m.gauges)} broken on relay :{m.relay.port}"
    return (f"soak {format_duration(s.duration)} watching both replicas ({watch} fails it)"
            + (" then an operator runs `orchestrate approve RUN_ID` (or --yes)" if s.approval else ""))


def _metrics(m: step_specs.MetricsSpec, rb: Runbook) -> str:
    parts = []
    if m.increase:
        parts.append(f"through the soak relay :{m.relay.port}, a prompt, {m.evict} unrelated prompts, then the prompt again: "
                     f"{', '.join(m.increase)} rises across that follow-up (host-restore evidence)")
    if m.gauges:
        parts.append(f"/metrics on :{m.relay.port}: " + "; ".join(bound_text(g) for g in m.gauges))
    return "; ".join(parts)


def _oneshot(o: step_specs.OneShotSpec, rb: Runbook) -> str:
    want = ["exits 0"]
    if o.ok_event:
        want.append(f'logs {{"event": "{o.ok_event}", "ok": true}}')
    if o.last_line:
        want.append(f"its last line contains {o.last_line!r}")
    return f"{o.service} " + " and ".join(want) + f" within {format_duration(o.timeout)}; its output kept in the run log"


def _markers(m: step_specs.MarkersSpec, rb: Runbook) -> str:
    parts = []
    for verb, names in (("logs", m.require), ("never logs", m.forbid)):
        if names:
            parts.append(f"{verb} " + ", ".join(f"{n} ({rb.log_markers[n]!r})" if rb.log_markers.get(n) else
                                              f"{n} (NOT CHECKED: marker unknown, set log_markers.{n})" for n in names))
    parts += [value_text(v) for v in m.values]
    return f"{m.service} " + "; ".join(parts)


def _presence(p: step_specs.PresenceSpec, rb: Runbook) -> str:
    parts = [f"listed healthy under {rb.domains.of(r)}" for r in p.listed]
    parts += [f"not listed under {rb.domains.of(r)}" for r in p.absent]
    who = "the host" if p.hosts == "this" else "every other host of the runbook (capacity guard)"
    return f"both model-proxy peers: {who} {' and '.join(parts)} within {format_duration(p.within)}"


def _labels(lb: step_specs.LabelsSpec, rb: Runbook) -> str:
    vals = rb.replica_values.get(lb.replica, {})
    parts = []
    if lb.log_tags:
        parts.append("log tags " + ", ".join(f"{k}:{vals.get(k)}" for k in lb.log_tags))
    if lb.otel_labels:
        parts.append("labels " + ", ".join(f"nearai.otel.{k}={vals.get(k)}" for k in lb.otel_labels))
    if lb.metric_labels and lb.relay is not None:
        parts.append(f"{lb.metric} through :{lb.relay.port} labelled " + ", ".join(lb.metric_labels))
    return f"{lb.service} carries {lb.replica}'s values: " + "; ".join(parts)


#: Each step kind's gate: a fixed text, or one made of the step's spec (`step.<kind>`; none for a
#: `check.`) and the runbook (a `Description` where it names a precondition).
_TEXTS: dict[str, str | Callable[[Any, Runbook], str | Description]] = {
    "check.env_map": "the dashboard lists the host exactly once; its env map is kept in memory only; "
        "no credential value is a mask or a placeholder",
    "check.rollback_targets": "the previous successful deploy (tag and file) of every service a rollback or a `previous:` request "
        "needs is known, and a dry run of each accepts its tag and file (checked before anything is stopped)",
    "check.before_state": "the previous successful deploy (tag and file) of every service a rollback needs is known, and a dry run "
        "of each accepts its tag and file (checked before anything is stopped); both peers "
        "list the host healthy under the long domain and not under the base domain; one long-domain "
        "completion succeeds",
    "up": "the stream ends with done/success; a broken stream is settled from compose-manager's status, docker/ps "
        "and the action log, never by sending the up again",
    "check.host_state": lambda _, rb: "what each service runs (docker/ps, and a dry run of the new file at the tag) matches a "
        "declared host state: " + "; ".join(f"{s.name} -> {s.action}" for s in rb.host_states)
        + ". A part-way state continues only with --continue; an unknown one is refused",
    "check.tag_age": lambda _, rb: f"GitHub: the tag exists in the host's compose-files repository, is merged to main and its "
        f"commit is at least {format_duration(rb.min_tag_age)} old (unreachable GitHub: refused unless --skip-tag-age-check)",
    "check.model_cache": lambda _, rb: "GET /host/cache lists " + (", ".join(rb.weights) or "the runbook's weights")
        + "; missing weights are named (the cold start then includes a download), never a failure",
    "check.prerequisites": lambda _, rb: "the journal holds, for each of " + "; ".join(
        f"{p.host}: its latest {p.runbook} rollout DONE at least {format_duration(p.soaked)} ago" for p in rb.prerequisites)
        + " (overridden only by name: rollout --override-prerequisite <host>, or approve --gate prerequisite:<host>)",
    "cache": lambda cache, _: f"GET /host/cache lists {', '.join(cache.holds)} (else the pre-stage did not fetch it: fail "
        f"before the host is touched; not checked where compose-manager does not answer it)",
    "relay": lambda relay, rb: f"through the soak relay :{relay.port} within {format_duration(rb.timeouts.relay)}: /health, "
        f"/v1/models lists {rb.model}, a deterministic generation is non-empty",
    "quiet": lambda quiet, _: "waits until " + quiet.describe(),
    "analysis": lambda analysis, _: analysis.describe(),
    "image": lambda image, rb: image.text(rb.replica_values),
    "capture": lambda c, _: f"the last {c.tail} lines of {', '.join(c.services)} kept" + (
        ", scrubbed, in the run's directory (logs/<run id>/<service>.log)" if c.to_file else " in the run log"),
    # the step kinds whose spec says what it checks (`spec.text()`), and what the plan adds to it
    "env": lambda env, _: env.text() + " (values are never shown)",
    "pull_request": lambda pr, _: pr.text() + " (an unreachable GitHub fails it)",
    **{key: lambda spec, _: spec.text() for key in ("manual", "proxy_pool", "http_json", "attestation", "query")},
    # the step kinds described by a function of their spec
    "check.budget": _budget, "down": _down, "logs": _cold_start, "verify": _verify, "soak": _soak, "metrics": _metrics,
    "oneshot": _oneshot, "markers": _markers, "presence": _presence, "labels": _labels,
}


def _from_text(key: str, text: str | Callable[[Any, Runbook], str | Description]) -> Callable[[Step, Runbook], Description]:
    def describe(step: Step, rb: Runbook) -> Description:
        said = text if isinstance(text, str) else text(getattr(step, key, None), rb)
        return said if isinstance(said, Description) else Description(said)
    return describe


DESCRIPTIONS: dict[str, Callable[[Step, Runbook], Description]] = {key: _from_text(key, text) for key, text in _TEXTS.items()}
DESCRIPTIONS["dry_run"] = _dry_run  # what a dry run checks is its step's `plan:`
