"""A captured service log kept whole in the run's directory (issue 23: `capture: {to_file: true}`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.engine.steps.activities import Activities


def save_log(rt: "Activities", service: str, lines: list[str]) -> Any:
    """Write a captured service log (already scrubbed) to `<state>/logs/<run_id>/<service>.log`
    (capture's `to_file`); the path, or a note that the run log is not open here."""
    from orchestrator.engine.run_logs import ROUTER

    where = ROUTER.directory(rt.run.run_id)
    if where is None:
        return "nowhere (the run's log is not open in this process)"
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{service}.log"
    path.write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")
    return path
