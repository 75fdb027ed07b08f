"""`orchestrate status`: where a run is, its steps, who did what (reads the journal only)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.options import InventoryOpt, command_app, flag, read_settings as load_settings
from orchestrator.util.user_errors import UserError

app = command_app()


@app.command()
def status(
    run_id: Optional[str] = typer.Argument(None, metavar="[RUN_ID]", help="Run id (default: the newest run)"),
    as_json: bool = flag("--json", "Machine output: one JSON object: the run's summary (run_id, host, kind, tag, "
                                   "target_tag, state, outcome, message, activity, activity_detail, ...), journal, "
                                   "inventory, transitions [[from, event, to, note], ...] and effects [{step, kind, mutating, status}, ...]"),
    inventory: Optional[Path] = InventoryOpt,
) -> None:
    """Where a run is (default: the newest): running, interrupted (its runner is gone),
    waiting for approval, or ended; its steps; which journal and inventory are used."""
    from orchestrator.service.reads import get_run, run_view
    from orchestrator.service.startup import ReadSession

    settings = load_settings(inventory)
    session = ReadSession.open(settings)
    try:
        if run_id is None:
            runs = session.journal.list_runs(limit=1)
            if not runs:
                raise UserError(f"no runs journaled yet in {settings.journal_location()}")
            run = runs[0]
        else:
            run = get_run(session, run_id)
        transitions = session.journal.transitions(run.run_id)
        effects = session.journal.effects(run.run_id)
        view = run_view(session, run, {})
        where = {"journal": settings.journal_location(), "inventory": settings.inventory_choice().describe()}
        if as_json:
            from orchestrator.journal import audit

            items = audit.entries(session.journal, run.run_id)
            view = {**view, "who": audit.summary(items), "audit": [e.to_json() for e in items]}
            sys.stdout.write(json.dumps({**view, **where,
                                         "transitions": [[t.from_state, t.event, t.to_state, t.note] for t in transitions],
                                         "effects": [{"step": e.step, "kind": e.kind, "mutating": e.mutating,
                                                      "status": (e.outcome or {}).get("status")} for e in effects]}, default=str) + "\n")
            return
        from orchestrator.service.step_list import step_list

        rows = step_list(run, getattr(settings, "state_dir", None))  # cached: no runbook schema to build
        tag = view["target_tag"] or "-"
        say = _Say()
        say.markup(f"run [bold]{run.run_id}[/bold] {run.kind} of {run.host} to {tag}: [bold]{run.outcome or run.state}[/bold]",
                   run.run_id, run.kind, run.host, tag, run.outcome or run.state)
        detail = view["activity_detail"]
        say.plain(detail if detail.startswith(view["activity"]) else f"{view['activity']}: {detail}")
        if run.message:
            say.plain(run.message)
        from orchestrator.journal import audit

        for line in audit.summary_lines(audit.entries(session.journal, run.run_id)):
            say.plain(line)  # who did what (journaled)
        say.plain(f"journal: {where['journal']}")
        say.plain(f"inventory: {where['inventory']}")
        visited = {t.from_state: t.event for t in transitions}
        for sid, section, step_say in rows:
            mark = {"ok": "[green]x[/green]", "skip": "[green]-[/green]", "fail": "[red]![/red]", "halt": "[red]![/red]",
                    "abort": "[yellow]a[/yellow]", "retry": "[yellow]r[/yellow]", "remedy": "[yellow]m[/yellow]"}.get(visited.get(sid, ""), " ")
            if sid == run.state and not run.terminal:
                mark = "[cyan]>[/cyan]"
            if section in ("rollback", "full_rollback", "remedy") and sid not in visited and sid != run.state:
                continue
            say.markup(f"[{mark}] {sid}: {step_say}", sid, step_say)
        say.flush()
    finally:
        session.close()


_OWN_TAGS = re.compile(r"\[/?(?:bold|green|red|yellow|cyan)\]")
_EMOJI_LIKE = re.compile(r":\S+?:|[\x00-\x1f\x7f]")  # an emoji code, or a tab or control character rich would change


class _Say:
    """Prints status's lines: through rich on a terminal (colours) or when rich would change the
    text (a `[` or an emoji code in the run's own text); else the same text plainly, without
    loading rich (what rich prints to a pipe: the markup of `status`'s own tags dropped)."""

    def __init__(self) -> None:
        self.lines: list[tuple[bool, str]] = []  # (markup?, line)
        self.texts: list[str] = []  # the run's own text in markup lines: rich could read a `[` in it as a tag

    def markup(self, line: str, *texts: str) -> None:
        self.lines.append((True, line))
        self.texts.extend(texts)

    def plain(self, line: str) -> None:
        self.lines.append((False, line))

    def flush(self) -> None:
        fast = (not sys.stdout.isatty() and not any(k in os.environ for k in ("FORCE_COLOR", "TTY_COMPATIBLE"))
                and not any("[" in t for t in self.texts) and not any(_EMOJI_LIKE.search(line) for _, line in self.lines))
        if fast:
            sys.stdout.write("".join((_OWN_TAGS.sub("", line) if markup else line) + "\n" for markup, line in self.lines))
            return
        from orchestrator.cli.render import out

        for markup, line in self.lines:
            out.print(line, markup=markup)
