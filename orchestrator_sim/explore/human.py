"""Invariant H (issue 21, "humans stay in the loop"), judged on the journal(s) of a schedule and the
explorer's own record of the commands it ran:

  H1 human at the gate   every approval gate a run passed (a transition out of a soak step that
                         waits for an approval) was approved by a human: a CLI `approve` (of that
                         gate or `*`), the page's Approve naming that gate, or `--yes` recorded while
                         a person's command given `--yes` drove that run (`rollout HOST --yes` or
                         `resume RUN --yes`, from the CLI or through `--server`), or a person's
                         `resume RUN` that kept the run's own `--yes` and said so. A run adopted by
                         `serve`, or resumed without `--yes` after a Ctrl-C or a crash, never passes
                         a gate on the `--yes` it was started with.
  H2 page names the gate an approval from the run page (the explorer's page clicks say
                         `by: explore-page`) names the gate the run was waiting at when it was
                         recorded: never `*`, never a gate not reached yet.

The explorer's hole schedules can break the product's guards (`breaks`, applied in each command by
`apply_breaks`, test-only) to show the judge sees what the guard prevents.
"""

from __future__ import annotations

import os
import sqlite3
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

PAGE_BY = "explore-page"
#: test-only breaks of a product guard, named by ORCHESTRATOR_TEST_BREAK (comma separated)
BREAKS = ("inherit-yes", "page-any-gate")
SLACK_S = 1.0  # the journal's clock and the explorer's are the same wall clock; a write lands within


def apply_breaks() -> None:
    """In a command's process (crash.configure): undo a product guard, for a hole schedule.
    inherit-yes: a resumed or adopted run passes its gates on the --yes it was started with (issue
    21 case 2). page-any-gate: the server takes any gate (and `*`) from the run page (case 3)."""
    breaks = {b for b in os.environ.get("ORCHESTRATOR_TEST_BREAK", "").split(",") if b}
    if "inherit-yes" in breaks:
        from orchestrator.engine.context import RunContext
        from orchestrator.engine.executor import loop

        init = loop.Executor.__init__

        def __init__(self: Any, *args: Any, **kw: Any) -> None:
            run = kw.get("run")
            if run is not None and RunContext.from_json(run.context).yes:
                kw["yes"] = True
            init(self, *args, **kw)

        loop.Executor.__init__ = __init__  # type: ignore[method-assign]  # the explorer's hook on every executor made
    if "page-any-gate" in breaks:
        from orchestrator.teamserver import worker

        for cls in vars(worker).values():
            if isinstance(cls, type) and callable(getattr(cls, "approve", None)) and cls.__module__ == worker.__name__:
                approve = cls.approve

                def any_gate(self: Any, run_id: str, gate: str, by: str, now: bool = False, *, at_gate: bool = False,
                             _approve: Any = approve) -> Any:
                    return _approve(self, run_id, gate, by, now, at_gate=False)

                cls.approve = any_gate  # type: ignore[attr-defined]  # a stand-in human, patched onto the class


_GATES: dict[tuple[str, str, str], set[str]] = {}


def approval_gates(runbook: str, kind: str, context: str) -> set[str]:
    """The states of a run that wait for an approval (its runbook's soak steps with `approval`)."""
    key = (runbook, kind, context)
    if key not in _GATES:
        import json

        from orchestrator.language.runbook import load_runbook_checked
        from orchestrator.service.run_info import table_for

        try:
            rb = load_runbook_checked(runbook)[0]
            ctx = json.loads(context) if isinstance(context, str) else (context or {})
            table = table_for(SimpleNamespace(kind=kind, context=ctx), rb)  # type: ignore[arg-type]  # only kind and context of a run are read
            _GATES[key] = {n for n, node in table.nodes.items() if node.step is not None and node.step.kind == "soak"
                           and node.step.soak is not None and node.step.soak.approval}
        except Exception:  # noqa: BLE001 - a runbook this checkout cannot load: judge nothing
            _GATES[key] = set()
    return _GATES[key]


def _ts(v: str) -> float:
    return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()


def _read(db: Path) -> dict[str, Any] | None:
    if not db.exists():
        return None
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
        try:
            runs = con.execute("SELECT run_id, host, runbook, kind, context FROM runs").fetchall()
            trans = con.execute("SELECT run_id, seq, from_state, event, to_state, at FROM transitions "
                                "ORDER BY run_id, seq").fetchall()
            apps = con.execute("SELECT run_id, gate, approved_by, approved_at FROM approvals").fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return None
    return {"runs": runs, "transitions": trans, "approvals": apps}


def _drives(c: Any, run_id: str, host: str) -> bool:
    """A person's command that runs `run_id` (of `host`) with --yes: given (`rollout HOST --yes`,
    `resume RUN --yes`), or a `resume RUN` that kept the run's own --yes and said so."""
    argv = c.argv
    if not argv:
        return False
    if argv[0] == "resume" and run_id in argv:
        return "--yes" in argv or bool(getattr(c, "kept_yes", False))
    if "--yes" not in argv:
        return False
    if argv[0] == "rollout":
        return any(host in a.split(",") for a in argv[1:])
    return False


def check_humans(journals: list[Path], commands: list[Any]) -> list[str]:
    out: list[str] = []
    for db in journals:
        j = _read(db)
        if j is None:
            continue
        by_run: dict[str, list[tuple[Any, ...]]] = {}
        for t in j["transitions"]:
            by_run.setdefault(t[0], []).append(t)
        approvals: dict[str, list[tuple[str, str, float]]] = {}
        for run_id, gate, who, at in j["approvals"]:
            approvals.setdefault(run_id, []).append((gate, who, _ts(at)))
        for run_id, host, runbook, kind, context in j["runs"]:
            gates = approval_gates(runbook, kind, context)
            trans = by_run.get(run_id, [])
            mine = approvals.get(run_id, [])
            # H2: a page approval names the gate the run waited at when it was recorded
            for gate, who, at in mine:
                if not who.startswith(PAGE_BY):
                    continue
                before = [t for t in trans if _ts(t[5]) <= at]
                waiting = before[-1][4] if before else None
                if gate == "*" or gate != waiting:
                    out.append(f"H2 page: the run page's Approve recorded gate {gate!r} for {run_id} while it was at "
                               f"{waiting} (the page may approve only the gate that is waiting)")
            # H1: every approval gate passed was approved by a human
            for _r, seq, frm, event, _to, _at in trans:
                if frm not in gates or event.lower() != "ok":
                    continue
                human = [who for g, who, _ in mine if who != "--yes" and (
                    (g == frm) or (g == "*" and not who.startswith(PAGE_BY)))]
                if human:
                    continue
                yes_at = [at for g, who, at in mine if who == "--yes" and g == frm]
                by_yes = [c for c in commands if _drives(c, run_id, host) and any(
                    c.wall_start - SLACK_S <= at - c.offset <= (c.wall_end if c.wall_end is not None else float("inf"))
                    + SLACK_S for at in yes_at)]
                if by_yes:
                    continue
                how = ("approved by --yes with no person's command given --yes driving the run then"
                       if yes_at else "with no approval recorded")
                out.append(f"H1 human: run {run_id} passed approval gate {frm} (transition {seq}) {how}: "
                           "an adopted or resumed run must wait for a human")
    return out
