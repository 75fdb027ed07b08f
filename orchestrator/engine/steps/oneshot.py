"""`oneshot:` wait for a container that runs once to finish. Pass: exit 0 and, where the step names
them, a last non-empty line containing `last_line` and a last `{"event": <ok_event>, "ok": true}`
line. A container no longer listed is judged by its log alone (whether docker/ps lists exited
containers is not known for the real compose-manager). The output is judged raw and kept scrubbed.
"""

from __future__ import annotations

import json
import re

from orchestrator.engine.steps.base import Activities, Node, Step, StepOutcome, error_text, fail, ok, register
from orchestrator.hosts.parsers.docker_ps import by_service
from orchestrator.language.step_specs import OneShotSpec
from orchestrator.util.durations import format_duration

_EXITED = re.compile(r"^Exited \((-?\d+)\)")


OUTPUT_TAIL = 2000


def exit_code(status: str) -> int | None:
    m = _EXITED.match(status.strip())
    return int(m.group(1)) if m else None


def judge_output(lines: list[str], last_line: str | None, ok_event: str | None, shown: list[str]) -> str | None:
    """None when the output shows a pass, else why not (quoting `shown`, the lines scrubbed, one for each)."""
    kept = [i for i, ln in enumerate(lines) if ln.strip()]
    text = [lines[i].strip() for i in kept]
    if last_line is not None and (not text or last_line not in text[-1]):
        return f"the last line is not {last_line!r}: {shown[kept[-1]].strip()[:200] if text else 'no output'}"
    if ok_event is not None:
        verdict = None
        for ln in text:
            try:
                obj = json.loads(ln)
            except ValueError:
                continue
            if isinstance(obj, dict) and obj.get("event") == ok_event:
                verdict = obj.get("ok")
        if verdict is None:
            return f"no {ok_event!r} event in its output"
        if verdict is not True:
            return f"{ok_event}: ok={json.dumps(verdict)}"
    return None


@register("oneshot")
async def oneshot_completion(rt: Activities, node: Node, step: Step) -> StepOutcome:
    o = step.spec(OneShotSpec)
    deadline = rt.clock.monotonic() + o.timeout
    first_id: str | None = None
    rt.emit("waiting", gate=f"{o.service} to finish")
    while True:
        seen = rt.clock.monotonic()  # when this observation began: a stall after it is never read as time the condition had
        c = by_service(await rt.ps()).get(o.service)
        if c is not None and first_id is None:
            first_id = c.id
        if c is not None and c.id != first_id:
            return fail(f"{o.service} was replaced while it ran (container ID changed)")
        if c is None:
            break  # gone from docker/ps: finished
        if c.restarting:
            return fail(f"{o.service} is restarting ({c.status}); a one-shot must run once")
        if c.state in ("exited", "dead"):
            break
        if seen >= deadline:
            return fail(f"{o.service} did not finish within {format_duration(o.timeout)} ({c.status})")
        await rt.wait()
    try:
        text = await rt.raw_log(o.service, OUTPUT_TAIL)
    except Exception as exc:  # the client's errors, named in the note
        return fail(f"{o.service} finished but its output could not be read: {rt.scrub(error_text(exc))}")
    lines = [ln.split(" | ", 1)[1] if " | " in ln else ln for ln in text.splitlines()]
    shown = rt.scrub_lines(lines)
    rt.log.info("oneshot_output", service=o.service, lines=shown)
    if lines:
        rt.emit("log_line", service=o.service, line=shown[-1][:200])
    code = exit_code(c.status) if c is not None else None
    if c is None and not lines:
        return fail(f"{o.service} is not in docker/ps and logged nothing: it never ran")
    if c is not None and code is None:
        return fail(f"{o.service} ended as {c.state} ({c.status}) without an exit code")
    why = judge_output(lines, o.last_line, o.ok_event, shown)
    if code not in (None, 0):
        return fail(f"{o.service} exited {code}" + (f"; {rt.scrub(why)}" if why else ""))
    if why:
        return fail(f"{o.service}: {rt.scrub(why)}")
    return ok(f"{o.service} " + ("exited 0" if code == 0 else "is no longer listed (judged by its output alone)")
              + (f" and logged {o.ok_event} ok" if o.ok_event else ""))
