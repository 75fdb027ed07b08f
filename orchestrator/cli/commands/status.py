"""`orchestrate status`: where a run is, its steps, who did what (reads the journal only)."""

from __future__ import annotations

import json
import sys
from contextlib import closing
from pathlib import Path

import typer
from rich.markup import escape

from orchestrator.cli.consoles import out
from orchestrator.cli.options import InventoryOpt, ServerCaOpt, ServerOpt, command_app, flag, remote
from orchestrator.journal import audit
from orchestrator.language.runbook import load_runbook
from orchestrator.service.reads import get_run, load_settings_for, run_view
from orchestrator.service.run_info import table_for
from orchestrator.service.startup import ReadSession
from orchestrator.util.text import shown
from orchestrator.util.user_errors import UserError

app = command_app()

#: How a step is marked by the event that left it (the run's current state: `>`).
_MARKS = {"ok": "[green]x[/green]", "skip": "[green]-[/green]", "fail": "[red]![/red]", "halt": "[red]![/red]",
          "abort": "[yellow]a[/yellow]", "retry": "[yellow]r[/yellow]", "remedy": "[yellow]m[/yellow]"}


@app.command()
def status(
    run_id: str | None = typer.Argument(None, metavar="[RUN_ID]", help="Run id (default: the newest run)"),
    as_json: bool = flag("--json", "Machine output: one JSON object: the run's summary (run_id, host, kind, tag, "
                                   "target_tag, state, outcome, message, activity, activity_detail, ...), journal, "
                                   "inventory, transitions [[from, event, to, note], ...] and effects [{step, kind, mutating, status}, ...]"),
    inventory: Path | None = InventoryOpt,
    server: str | None = ServerOpt,
    server_ca: Path | None = ServerCaOpt,
) -> None:
    """Where a run is (default: the newest): running, interrupted (its runner is gone),
    waiting for approval, or ended; its steps; which journal and inventory are used."""
    if server and run_id is None:
        raise UserError("status --server needs a RUN_ID: `orchestrate runs --server URL` lists them")
    remote(server, "status", {"run_id": run_id}, as_json, server_ca)
    settings = load_settings_for(inventory)
    with closing(ReadSession.open(settings)) as session:
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
            items = session.journal.audit(run.run_id)
            view = {**view, "who": audit.summary(items), "audit": [e.to_json() for e in items]}
            sys.stdout.write(json.dumps({**view, **where,
                                         "transitions": [[t.from_state, t.event, t.to_state, t.note] for t in transitions],
                                         "effects": [{"step": e.step, "kind": e.kind, "mutating": e.mutating,
                                                      "status": (e.outcome or {}).get("status")} for e in effects]}, default=str) + "\n")
            return
        table = table_for(run, load_runbook(run.runbook))
        tag = view["target_tag"] or "-"
        state = run.outcome or run.state
        # every journaled field is external text (a shared journal holds what any writer put there)
        header = [escape(shown(str(x))) for x in (run.run_id, run.kind, run.host, tag, state)]
        out.print("run [bold]{}[/bold] {} of {} to {}: [bold]{}[/bold]".format(*header))
        detail = view["activity_detail"]
        lines = [detail if detail.startswith(view["activity"]) else f"{view['activity']}: {detail}"]
        if run.message:
            lines.append(run.message)
        lines += audit.summary_lines(session.journal.audit(run.run_id))  # who did what (journaled)
        lines += [f"journal: {where['journal']}", f"inventory: {where['inventory']}"]
        for line in lines:  # the message, notes and who: external text, shown as text (controls visible)
            out.print(shown(line), markup=False)
        visited = {t.from_state: t.event for t in transitions}
        for sid in table.order:
            node = table.nodes[sid]
            mark = _MARKS.get(visited.get(sid, ""), " ")
            if sid == run.state and not run.terminal:
                mark = "[cyan]>[/cyan]"
            if node.section in ("rollback", "full_rollback", "remedy") and sid not in visited and sid != run.state:
                continue
            out.print(f"[{mark}] {escape(shown(sid))}: {escape(shown(node.step.say)) if node.step else ''}")
