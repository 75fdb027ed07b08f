"""`orchestrate plan`: the offline, deterministic preview of a run, rendered from the state table.

No network, no clock, no disk beyond reading the runbook and (optionally) a compose file. Every
step shows the exact compose-manager request, the gate checked after it and the transition taken
if that gate fails. The env map is shown as a placeholder, never values.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from itertools import groupby
from typing import Any

from orchestrator.engine.step_descriptions import describe_step, manual_plan_lines
from orchestrator.hosts.budget import format_gib, parse_budget, per_rank_bytes
from orchestrator.language.machine import TERMINALS, Event, Table
from orchestrator.language.references import describe_file
from orchestrator.language.runbook import SELECTED, Runbook, Step
from orchestrator.util.durations import format_duration


@dataclass
class PlanStep:
    number: int
    state: str
    section: str
    phase: str | None
    say: str
    request: dict[str, Any] | None
    gate: str
    on_fail: str
    on_abort: str | None
    on_skip: str | None = None
    precondition: str | None = None
    #: For an up: services running at that point that the file does not define (orphan removal).
    orphans: list[str] = field(default_factory=list)
    unsafe: bool = False
    #: For a gate with a remedy: what sends REMEDY and where it goes (`-> first remedy state`).
    on_remedy: str | None = None
    #: For a remedy's last step: where the run goes after it (its gate, again).
    then: str | None = None


@dataclass
class Plan:
    host: str
    tag: str
    runbook: str
    title: str
    kind: str
    env_placeholder: str
    budget: str
    steps: list[PlanStep]
    checks: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    orphan_basis: str = ""
    #: A fleet run (`--hosts`): the hosts in the order they run, and the rules between them. The
    #: steps are shown for the first host; every host runs the same steps in turn.
    fleet: list[str] = field(default_factory=list)
    fleet_rules: list[str] = field(default_factory=list)
    #: every manual edit, and which rollback needs one (said before the steps)
    manual: list[str] = field(default_factory=list)


def fleet_rules(rb: Runbook, hosts: list[str]) -> list[str]:
    """What happens between the hosts of a fleet run (orchestrator/engine/fleet.py), in words."""
    rules = [f"one host at a time, in this order: {' -> '.join(hosts)}",
             "each host is a rollout run of its own (lease, journal, gates, rollback); the next starts only after the "
             "previous one ended DONE" + (" (its soak passed and an operator approved it)"
                                          if any(st.soak is not None and st.soak.approval for ph in rb.phases for st in ph.steps)
                                          else ""),
             "the fleet stops at the first host that does not end DONE; the hosts after it are not touched"]
    for p in rb.prerequisites:
        rules.append(f"before any host: {p.host}'s latest {p.runbook} rollout DONE at least {format_duration(p.soaked)} ago "
                     f"(read from the journal; overridden only by name: --override-prerequisite {p.host})")
    if any(st.presence is not None and st.presence.hosts == "others" for steps in rb.step_lists() for st in steps):
        rules.append("before each host leaves the pool: both model-proxy peers list every other host of the runbook healthy "
                     "(capacity guard)")
    return rules


def _request(step: Step, rb: Runbook, tag: str, project: str | None, env: str,
             previous: Mapping[str, Mapping[str, str]] | None) -> dict[str, Any] | None:
    spec = step.compose
    if spec is None:
        return None
    req_tag, req_file = describe_file(spec.file, rb, tag, previous)
    services = ["<services the previous dry run found on an older definition>"] if spec.services == SELECTED else list(spec.services)
    body: dict[str, Any] = {"tag": req_tag, "file": req_file}
    if project:
        body["project"] = project
    body["services"] = services
    body["env"] = env
    path = "/compose/down" if step.down is not None else "/compose/up"
    if step.down is None:
        body["force_recreate"] = bool(spec.force_recreate)  # only on services whose only change is inline configs
        body["dry_run"] = step.dry_run is not None
    return {"method": "POST", "path": path, "body": body}


def _target(to: str | None) -> str | None:
    return to if to is None or to in TERMINALS else f"-> {to}"


def _orphan_analysis(plan_steps: list[PlanStep], table: Table, rb: Runbook, new_services: set[str] | None) -> str:
    new_def: set[str] = set()
    prev_def: set[str] = set()
    for steps in rb.step_lists():
        for s in steps:
            c = s.compose
            if c is None or c.services == SELECTED:
                continue
            (new_def if c.file == "new" else prev_def).update(c.services)
    if rb.phases:
        for s in rb.phases[-1].steps:
            if s.plan is not None and isinstance(s.plan.change, list):
                new_def.update(s.plan.change)
    basis = "inferred from the runbook's own requests"
    if new_services is not None:
        new_def = set(new_services)
        basis = "the new file from --compose-file; the previous file inferred from the runbook"
    by_state = {p.state: p for p in plan_steps}
    running_at: dict[str, set[str]] = {}

    def apply(step: Step, running: set[str], state: str | None = None) -> set[str]:
        """What runs after `step`; with `state`, an up's orphans noted on its plan step."""
        c = step.compose
        if c is None or step.dry_run is not None:
            return running
        defined = new_def if c.file == "new" else prev_def
        if state is not None and step.up is not None:  # only an applied up removes orphans
            # a one-shot the runbook waits out (model-downloader) has exited by then: removing an exited
            # container takes nothing down, and docker/ps does not list it as running
            orphans = sorted(running - defined - rb.oneshot_services())
            by_state[state].orphans, by_state[state].unsafe = orphans, bool(orphans)
        if c.services == SELECTED:
            return running
        return running - set(c.services) if step.down is not None else (running & defined) | set(c.services)

    def walk(cur: str, running: set[str]) -> None:
        """Follow OK edges from `cur` until a terminal or a state already placed."""
        while cur not in TERMINALS and cur not in running_at:
            running_at[cur] = set(running)
            step = table.nodes[cur].step
            if step is not None:
                running = apply(step, running, cur)
            cur = table.edges[(cur, Event.OK)]

    walk(table.start, set(prev_def))  # the happy path
    order = list(table.order)
    # every remedy chain from its gate (it ends back at its gate), then every rollback chain from the
    # latest state that can enter it: in reading order, each remedy comes right after its gate
    entered_by = {"remedy": (Event.REMEDY,), "rollback": (Event.FAIL, Event.ABORT), "full_rollback": (Event.FAIL, Event.ABORT)}
    for sid in order:
        events = entered_by.get(table.nodes[sid].section)
        if events is None or sid in running_at:
            continue
        entries = [s for s in running_at if any(table.edges.get((s, e)) == sid for e in events)]
        if not entries:
            continue
        latest = max(entries, key=order.index)
        step = table.nodes[latest].step
        walk(sid, set(running_at[latest]) if step is None else apply(step, set(running_at[latest])))
    return basis


def build_plan(rb: Runbook, table: Table, *, host: str, tag: str, project: str | None = None,
               new_file_services: set[str] | None = None, previous: Mapping[str, Mapping[str, str]] | None = None,
               env_keys: int | None = None) -> Plan:
    """The plan; `plan --live` passes the previous deploys it established and the env map's key count."""
    env = f"<env map of {host}, read at run time>" if env_keys is None else f"<env map of {host}: {env_keys} keys>"
    b = rb.budget
    replica = parse_budget(b.default).bytes if b else 0
    rank = per_rank_bytes(replica, b.ranks_per_replica) if b else 0
    steps: list[PlanStep] = []
    for i, sid in enumerate(table.order, start=1):
        node = table.nodes[sid]
        step = node.step
        ev = {e: to for e in Event if (to := table.edges.get((sid, e))) is not None}
        if step is None:
            steps.append(PlanStep(i, sid, node.section, node.phase,
                                  "hand over to a human" if ev.get(Event.OK) == "HALTED" else "end: nothing to undo", None,
                                  "-", _target(ev.get(Event.OK)) or "", None))
            continue
        desc = describe_step(step, rb)  # the handler's own text, without loading the handlers
        on_remedy = then = None
        if Event.REMEDY in ev and step.remedy is not None:
            cap = table.remedy_cap(sid)
            on_remedy = (f"on a line with {rb.log_markers.get(step.remedy.marker)!r} (log marker {step.remedy.marker}; "
                         f"at most {cap} time{'s' if cap != 1 else ''} in a run, then it fails) {_target(ev[Event.REMEDY])}")
        if node.section == "remedy" and ev.get(Event.OK) == table.remedy_of.get(sid):
            then = f"{_target(ev[Event.OK])} (its gate again, reading the engine's log afresh)"
        steps.append(PlanStep(
            number=i, state=sid, section=node.section, phase=node.phase, say=step.say,
            request=_request(step, rb, tag, project, env, previous),
            gate=desc.gate + (f"; {step.watch.describe()}" if step.watch is not None else "")
            + (" (observe only: its pass or failure is recorded and notified; the run goes on either way)"
                              if step.observe else ""),
            on_fail=_target(ev.get(Event.FAIL)) or "",
            on_abort=_target(ev.get(Event.ABORT)),
            on_skip=_target(ev.get(Event.SKIP)),
            precondition=desc.precondition,
            on_remedy=on_remedy,
            then=then,
        ))
    plan = Plan(
        host=host, tag=tag, runbook=rb.name, title=rb.title, kind=table.kind,
        env_placeholder=env,
        budget=("; ".join(f"{m.variable}={m.default} per replica ({format_gib(parse_budget(m.default).bytes)}) x {m.replicas} "
                          f"for {', '.join(m.engines)}, {m.ranks_per_replica} ranks: rank_budget_bytes="
                          f"{per_rank_bytes(parse_budget(m.default).bytes, m.ranks_per_replica)}" for m in rb.budgets())
                if rb.more_budgets else
                f"{b.variable}={b.default} per replica ({format_gib(replica)}), {b.ranks_per_replica} ranks: rank_budget_bytes={rank}"
                if b else "none (no HiCache host-RAM budget in this runbook)"),
        steps=steps,
    )
    plan.orphan_basis = _orphan_analysis(steps, table, rb, new_file_services)
    plan.manual = manual_plan_lines(table)
    return plan


# -- rendering --------------------------------------------------------------------------------------

_SECTION_TITLE = {"preflight": "Preflight (changes nothing)", "forward": "Procedure",
                  "remedy": "Remedy of the gate above (taken only on its log marker)", "rollback": "Rollback of a phase",
                  "full_rollback": "Whole-host rollback (the runbook's safe order)", "terminal": ""}


def render_json(plan: Plan) -> str:
    out = asdict(plan)
    if not out["manual"]:  # only a runbook with manual edits has the key
        del out["manual"]
    return json.dumps(out, indent=2, sort_keys=False)


def _req_line(req: dict[str, Any]) -> str:
    return f"{req['method']} {req['path']} " + json.dumps(req["body"], separators=(", ", ": "))


def render_text(plan: Plan) -> str:
    out = [f"{plan.title}", f"host {plan.host}  tag {plan.tag}  runbook {plan.runbook}", f"budget: {plan.budget}", ""]
    out[3:3] = [f"MANUAL: {m}" for m in plan.manual]
    if plan.fleet:
        out[1] = f"fleet {' -> '.join(plan.fleet)}  tag {plan.tag}  runbook {plan.runbook}"
        out[3:3] = ["", "== Fleet order", *(f"- {r}" for r in plan.fleet_rules),
                    f"The steps below run for each host in turn (shown for {plan.host})."]
    for section, steps in groupby(plan.steps, key=lambda s: s.section):
        out.append(f"== {_SECTION_TITLE.get(section, section)}")
        for s in steps:
            out.append(f"[ ] {s.number:>2}. {s.state}: {s.say}")
            out += [f"        {line}" for line in _step_details(s, markdown=False)]
    out += ["", f"orphans: {plan.orphan_basis}", *(f"check: {c}" for c in plan.checks),
            *(f"MISMATCH: {p}" for p in plan.problems)]
    return "\n".join(out) + "\n"


def _step_details(s: PlanStep, *, markdown: bool) -> list[str]:
    """A step's lines under its heading, in the text's or the markdown's wording."""
    out = [f"precondition: {s.precondition}"] if s.precondition else []
    if s.request:
        out.append(f"call: `{_req_line(s.request)}`" if markdown else f"call: {_req_line(s.request)}")
    out.append(f"gate: {s.gate}")
    if s.orphans:
        unsafe = " — **UNSAFE**" if markdown else "  UNSAFE"
        out.append(f"orphans: {', '.join(s.orphans)}{unsafe}: this up would remove them; its dry run refuses it")
    elif s.request and s.request["path"] == "/compose/up" and not s.request["body"]["dry_run"] and s.section != "forward":
        out.append("orphans: none (the file defines every service running at this point)")
    if markdown:
        out.append(f"on failure: {s.on_fail}" + (f"; on abort: {s.on_abort}" if s.on_abort else ""))
    else:
        out.append(f"on failure {s.on_fail}" + (f"; on abort {s.on_abort}" if s.on_abort else "")
                   + (f"; if nothing to change {s.on_skip}" if s.on_skip else ""))
    out += [s.on_remedy] if s.on_remedy else []
    out += [f"then {s.then}"] if s.then else []
    return out


def _group_title(s: PlanStep) -> str:
    title = _SECTION_TITLE.get(s.section, s.section) or "End states"
    return f"{title}: phase {s.phase}" if s.phase and s.phase != s.section else title


def render_markdown(plan: Plan) -> str:
    """A CI job summary: the header and the compose-file check in the open, every phase of every
    section in its own collapsible `<details>` (GitHub renders markdown inside it only after a
    blank line, hence the empty lines around each body)."""
    out = [f"### {plan.title}", "", f"Host `{plan.host}`, tag `{plan.tag}`, runbook `{plan.runbook}`.", "",
           f"Budget: {plan.budget}.", ""]
    if plan.fleet:
        out[2] = f"Fleet {' → '.join(f'`{h}`' for h in plan.fleet)}, tag `{plan.tag}`, runbook `{plan.runbook}`."
        out += ["#### Fleet order", "", *(f"- {r}" for r in plan.fleet_rules), "",
                f"The steps below run for each host in turn (shown for `{plan.host}`).", ""]
    if plan.checks or plan.problems:
        out += ["#### Compose file check", ""]
        out += [f"- **mismatch**: {p}" for p in plan.problems]
        out += [f"- ok: {c}" for c in plan.checks]
        out.append("")
    for title, group in groupby(plan.steps, key=_group_title):
        steps = list(group)
        unsafe = " — **UNSAFE orphans**" if any(s.orphans for s in steps) else ""
        out += ["<details>", f"<summary>{title} ({len(steps)} steps){unsafe}</summary>", ""]
        for s in steps:
            out.append(f"- [ ] **{s.number}. `{s.state}`** {s.say}")
            out += [f"  - {line}" for line in _step_details(s, markdown=True)]
        out += ["", "</details>", ""]
    return "\n".join(out)
