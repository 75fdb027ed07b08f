"""`markers:` a service's log (a wide window) holds every `require` marker and no `forbid` marker; a
marker the runbook leaves null is reported as not checked; each numeric value is checked on every
matching line, at least `at_least` of them. Lines are judged raw and quoted scrubbed.
"""

from __future__ import annotations

import re

from orchestrator.engine.step_descriptions import value_text
from orchestrator.engine.steps.base import Activities, Node, Step, StepOutcome, error_text, fail, ok, register
from orchestrator.language.step_specs import LogValue, MarkersSpec

MARKER_WINDOW = 5000


def judge_markers(lines: list[str], markers: dict[str, str | None], require: list[str], forbid: list[str],
                  values: list[LogValue], shown: list[str]) -> tuple[list[str], list[str]]:
    """(problems, not checked). Quoted lines come from `shown` (the lines scrubbed, one for each)."""
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
        hit = next((i for i, ln in enumerate(lines) if text in ln), None)
        if hit is not None:
            problems.append(f"forbidden marker {name}: {shown[hit].strip()[:200]}")
    for v in values:
        rx = re.compile(v.pattern)
        seen = 0
        for i, ln in enumerate(lines):
            m = rx.search(ln)
            if not m:
                continue
            seen += 1
            # a match is quoted alone only from a line shown as it is (a secret's piece could be in it)
            alone = shown[i] == ln
            on_line = f"on a line ({shown[i].strip()[:200]})"
            try:
                x = float(m.group(1))
            except ValueError:
                problems.append(f"/{v.pattern}/ matched a non-number " + (repr(m.group(1)) if alone else on_line))
                continue
            low = v.min if v.equals is None else v.equals - v.tolerance
            high = v.max if v.equals is None else v.equals + v.tolerance
            if (low is not None and x < low) or (high is not None and x > high):
                problems.append(f"{m.group(0) if alone else 'a value ' + on_line} is outside {value_text(v)}")
                break
        if seen < v.at_least:
            problems.append(f"/{v.pattern}/ matched {seen} line(s), at least {v.at_least} needed")
    return problems, unknown


@register("markers")
async def markers(rt: Activities, node: Node, step: Step) -> StepOutcome:
    m = step.spec(MarkersSpec)
    try:
        text = await rt.raw_log(m.service, MARKER_WINDOW)
    except Exception as exc:  # the client's errors, named in the note
        return fail(f"{m.service}: its log could not be read: {rt.scrub(error_text(exc))}")
    lines = [ln.split(" | ", 1)[1] if " | " in ln else ln for ln in text.splitlines()]
    problems, unknown = judge_markers(lines, rt.rb.log_markers, m.require, m.forbid, m.values, rt.scrub_lines(lines))
    if problems:
        return fail(f"{m.service}: " + rt.scrub("; ".join(problems)))
    return ok(f"{m.service}: log markers hold" + (f" (not checked, marker unknown: {', '.join(unknown)})" if unknown else ""))
