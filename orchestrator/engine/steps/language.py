"""Runbook-language gates: per-service log markers with numeric tolerances, domain roles on both
peers (drain / rejoin), log capture before a stop, prerequisites from the journal.

Rules:
- markers: the service's log since its container started (a wide window) must hold every
  `require` marker and no `forbid` marker; a marker the runbook leaves null is unknown and is
  reported as not checked (never an invented string); each numeric value is checked on every
  matching line, and at least `at_least` lines must match;
- presence: on every model-proxy peer the host is listed healthy under each `listed` role's domain
  and not listed at all (on any port) under each `absent` role's domain, polled until `within`
  runs out. With `hosts: others` (the capacity guard) the runbook's other hosts must be listed, and
  none of them may have a run that has not ended (one host of a tier at a time, whoever runs it);
  an other host the inventory does not know fails the gate;
- capture: the services' last `tail` lines go to the run log (`log_capture`), scrubbed; a service
  with no log is noted, not failed (capturing must never block a rollback);
- prerequisites: see `orchestrator.engine.rules.prerequisites`; overridden only by an approval named
  `prerequisite:<host>` (`orchestrate approve RUN_ID --gate prerequisite:gpu02`).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from orchestrator.language.machine import Node
from orchestrator.engine.rules.prerequisites import unfinished, unmet_in
from orchestrator.language.runbook import LogValue, Step
from orchestrator.engine.step_descriptions import value_text
from orchestrator.engine.steps.base import Described, StepOutcome, fail, halt, ok, register
from orchestrator.engine.steps.evidence import error_text

if TYPE_CHECKING:
    from orchestrator.engine.steps.activities import Activities

MARKER_WINDOW = 5000


def judge_markers(lines: list[str], markers: dict[str, str | None], require: list[str], forbid: list[str],
                  values: list[LogValue]) -> tuple[list[str], list[str]]:
    """(problems, not checked) for a service's log lines."""
    problems: list[str] = []
    unknown: list[str] = []
    for name in require:
        text = markers.get(name)
        if text is None:
            unknown.append(name)
        elif not any(text in ln for ln in lines):
            problems.append(f"required marker {name} ({text!r}) not in the log")
    for name in forbid:
        text = markers.get(name)
        if text is None:
            unknown.append(name)
            continue
        hit = next((ln for ln in lines if text in ln), None)
        if hit is not None:
            problems.append(f"forbidden marker {name}: {hit.strip()[:200]}")
    for v in values:
        rx = re.compile(v.pattern)
        seen = 0
        for ln in lines:
            m = rx.search(ln)
            if not m:
                continue
            seen += 1
            try:
                x = float(m.group(1))
            except ValueError:
                problems.append(f"/{v.pattern}/ matched a non-number {m.group(1)!r}")
                continue
            low = v.min if v.equals is None else v.equals - v.tolerance
            high = v.max if v.equals is None else v.equals + v.tolerance
            if (low is not None and x < low) or (high is not None and x > high):
                problems.append(f"{m.group(0)} is outside {value_text(v)}")
                break
        if seen < v.at_least:
            problems.append(f"/{v.pattern}/ matched {seen} line(s), at least {v.at_least} needed")
    return problems, unknown


@register
class Markers(Described):
    key = "markers"

    async def run(self, rt: "Activities", node: Node, step: Step) -> StepOutcome:
        m = step.markers
        assert m is not None
        try:
            text = await rt.service_log(m.service, MARKER_WINDOW)
        except Exception as exc:  # noqa: BLE001 - the client's errors, named in the note
            return fail(f"{m.service}: its log could not be read: {rt.scrub(error_text(exc))}")
        lines = [ln.split(" | ", 1)[1] if " | " in ln else ln for ln in text.splitlines()]
        problems, unknown = judge_markers(lines, rt.rb.log_markers, m.require, m.forbid, m.values)
        if problems:
            return fail(f"{m.service}: " + rt.scrub("; ".join(problems)))
        return ok(f"{m.service}: log markers hold" + (f" (not checked, marker unknown: {', '.join(unknown)})" if unknown else ""))


@register
class Presence(Described):
    key = "presence"

    async def run(self, rt: "Activities", node: Node, step: Step) -> StepOutcome:
        p = step.presence
        assert p is not None
        if p.hosts == "others":
            others = [h for h in rt.rb.hosts if h != rt.run.host]
            unknown = [h for h in others if rt.address_of(h) is None]
            if unknown:  # never assume a host we cannot ask about carries the domain
                return fail(f"capacity cannot be confirmed: {', '.join(unknown)} not in the inventory (the runbook's "
                            f"hosts: {', '.join(rt.rb.hosts)}); add it to the inventory, or take it out of the runbook's "
                            f"hosts: if it no longer belongs to this tier")
            busy = unfinished(rt.journal, others)
            if busy:  # two hosts of one tier never leave it at once, even from two terminals
                return fail("one host of the tier at a time: " + "; ".join(
                    f"{h} has run {r.run_id} ({r.kind}) that has not ended, at {r.state}" for h, r in busy))
            targets = {h: rt.address_of(h) or "" for h in others}
        else:
            targets = {rt.run.host: rt.entry.model_proxy_address}
        shown = ", ".join(f"{h} ({a})" for h, a in targets.items())
        deadline = rt.clock.monotonic() + p.within
        rt.emit("waiting", gate=f"both peers: {shown} " + describe_roles(p.listed, p.absent))
        while True:
            seen = rt.clock.monotonic()  # when this observation began: a stall after it is never read as time the condition had
            try:
                problems = await rt.presence_problems(targets, p.listed, p.absent)
            except Exception as exc:  # noqa: BLE001 - a peer that does not answer is a problem, retried
                problems = [rt.scrub(error_text(exc))]
            if not problems:
                short = await rt.recheck_after_drain(step) if p.absent else None  # a drain confirmed: the tier again
                return halt(short) if short else ok(f"both peers: {shown} " + describe_roles(p.listed, p.absent))
            if seen >= deadline:
                return fail("; ".join(problems))
            await rt.wait()


def describe_roles(listed: list[str], absent: list[str]) -> str:
    return ", ".join([f"listed under {r}" for r in listed] + [f"absent from {r}" for r in absent])


@register
class Capture(Described):
    key = "capture"

    async def run(self, rt: "Activities", node: Node, step: Step) -> StepOutcome:
        c = step.capture
        assert c is not None
        kept = []
        for svc in c.services:
            try:
                text = await rt.service_log(svc, c.tail)
            except Exception as exc:  # noqa: BLE001 - capturing never blocks what follows
                rt.log.warning("log_capture_failed", service=svc, reason=rt.scrub(error_text(exc)))
                continue
            lines = text.splitlines()
            if c.to_file:
                from orchestrator.engine.steps.logfile import save_log  # issue 23: the whole log in the run's directory

                where = save_log(rt, svc, [rt.scrub(ln) for ln in lines])
                rt.log.info("log_capture_file", service=svc, path=str(where), lines=len(lines))
                kept.append(f"{svc} ({len(lines)} lines in {where})")
                continue
            rt.log.info("log_capture", service=svc, lines=[rt.scrub(ln) for ln in lines])
            kept.append(f"{svc} ({len(lines)} lines)")
        return ok("captured " + (", ".join(kept) or "nothing (no log)"))


@register
class Prerequisites(Described):
    key = "check.prerequisites"

    async def run(self, rt: "Activities", node: Node, step: Step) -> StepOutcome:
        overrides = [g.split(":", 1)[1] for g in rt.approvals() if g.startswith("prerequisite:")]
        problems = unmet_in(rt.journal, rt.rb.prerequisites, datetime.now(timezone.utc), overrides)
        if problems:
            return fail("prerequisite not met: " + "; ".join(problems))
        return ok("prerequisites met" + (f" (overridden by name: {', '.join(overrides)})" if overrides else ""))
