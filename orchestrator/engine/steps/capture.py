"""`capture:` services' last `tail` log lines kept, scrubbed, in the run log (or with `to_file` in
`<state>/logs/<run_id>/<service>.log`). A service with no log is noted: capturing never blocks.
"""

from __future__ import annotations

from typing import Any

from orchestrator.engine.run_logs import ROUTER
from orchestrator.engine.steps.base import Activities, Node, Step, StepOutcome, error_text, ok, register
from orchestrator.language.step_specs import CaptureSpec


@register("capture")
async def capture(rt: Activities, node: Node, step: Step) -> StepOutcome:
    c = step.spec(CaptureSpec)
    kept = []
    for svc in c.services:
        try:
            text = await rt.raw_log(svc, c.tail)
        except Exception as exc:  # capturing never blocks what follows
            rt.log.warning("log_capture_failed", service=svc, reason=rt.scrub(error_text(exc)))
            continue
        lines = rt.scrub_lines(text.splitlines())
        if c.to_file:
            where = save_log(rt, svc, lines)
            rt.log.info("log_capture_file", service=svc, path=str(where), lines=len(lines))
            kept.append(f"{svc} ({len(lines)} lines in {where})")
            continue
        rt.log.info("log_capture", service=svc, lines=lines)
        kept.append(f"{svc} ({len(lines)} lines)")
    return ok("captured " + (", ".join(kept) or "nothing (no log)"))


def save_log(rt: Activities, service: str, lines: list[str]) -> Any:
    """The path the (scrubbed) lines were written to, or a note that the run log is not open here."""
    where = ROUTER.directory(rt.run.run_id)
    if where is None:
        return "nowhere (the run's log is not open in this process)"
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{service}.log"
    path.write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")
    return path
