"""`orchestrate`: the command line. Exit codes: 0 done, 1 unexpected, 2 bad input, 3 rolled back,
4 halted (a human must act), 5 aborted before any change (or refused)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from orchestrator.commands import parse_soak
from orchestrator.durations import format_duration
from orchestrator.exit_codes import OUTCOME_EXIT, ExitCode
from orchestrator.journal.base import RunNotFound, RunRecord
from orchestrator.machine import compile_rollback, compile_rollout
from orchestrator.outcome import Outcome
from orchestrator.plan import build_plan, render_json, render_markdown, render_text
from orchestrator.runbook import DEFAULT_RUNBOOK, load_runbook
from orchestrator.server.cli import serve_app
from orchestrator.settings import Settings
from orchestrator.user_errors import UserError

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__, pretty_exceptions_enable=False)
err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)

InventoryOpt = typer.Option(None, "--inventory", help="Host inventory YAML (default: $ORCHESTRATOR_INVENTORY or config/hosts.yaml)")
RunbookOpt = typer.Option(DEFAULT_RUNBOOK, "--runbook", help="Runbook name (in runbooks/) or path")
JsonOpt = typer.Option(False, "--json", help="One JSON object per event on stdout, then a final summary")
ServerOpt = typer.Option(None, "--server", metavar="URL",
                         help="Send this to the `orchestrate serve` at URL instead of running it here (token: $ORCHESTRATOR_SERVER_TOKEN)")
ServerCaOpt = typer.Option(None, "--server-ca", metavar="FILE",
                           help="CA certificate that the --server https:// URL must chain to (default: $ORCHESTRATOR_SERVER_CA)")


def _settings(inventory: Optional[Path]) -> Settings:
    s = Settings()
    if inventory is not None:
        s = s.model_copy(update={"inventory": inventory})
    return s


class LiveProgress:
    """Human progress: the current step, elapsed time, the gate being waited on, the last
    interesting log line, each step's outcome. Long waits also show their length on the run's
    clock (in the demo, simulated time: a 50-minute cold start takes seconds)."""

    def __init__(self, console: Console) -> None:
        self.c = console
        self.t0 = time.monotonic()
        self.step_clock = 0.0

    def _ts(self) -> str:
        e = time.monotonic() - self.t0
        return f"[dim]{int(e) // 60:02d}:{e % 60:04.1f}[/dim]"

    def event(self, kind: str, **f: Any) -> None:
        ts = self._ts()
        if kind == "run_started":
            self.c.print(f"{ts} run [bold]{f['run_id']}[/bold] on {f['host']} from {f['state']}")
        elif kind == "step_started":
            self.step_clock = f.get("clock", 0.0)
            self.c.print(f"{ts} [bold cyan]{f['state']}[/bold cyan] {f.get('say', '')}")
        elif kind == "waiting":
            self.c.print(f"{ts}   waiting on: {f['gate']}")
        elif kind == "log_line":
            self.c.print(f"{ts}   [dim]{f['service']}: {f['line'][:150]}[/dim]")
        elif kind == "effect":
            self.c.print(f"{ts}   -> {f['action']} {', '.join(f['services'])} ({f['file']}@{f['tag']})")
        elif kind == "transition":
            ev = f["event_name"]
            colour = {"ok": "green", "skip": "green", "fail": "red", "halt": "red", "abort": "yellow", "retry": "yellow"}.get(ev, "white")
            waited = f.get("clock", 0.0) - self.step_clock
            took = f" after {format_duration(waited)}" if waited >= 600 else ""
            where = "" if ev == "ok" and not f["to"].isupper() else f" -> {f['to']}"
            self.c.print(f"{ts}   [{colour}]{ev}[/{colour}]{took}{where}" + (f": {f['note']}" if f.get("note") else ""))
        elif kind == "run_finished":
            colour = "green" if f["outcome"] == Outcome.DONE else "red"
            self.c.print(f"{ts} [bold {colour}]{f['outcome']}[/bold {colour}] {f.get('message') or ''}")
        elif kind == "note":
            self.c.print(f"{ts}   note: {f['text']}")
        elif kind == "heartbeat":
            timeout = f" / {format_duration(f['timeout'])}" if f.get("timeout") else ""
            extra = ""
            if f.get("missing"):
                extra += "; missing: " + "; ".join(f["missing"])[:200]
            if f.get("last_line"):
                extra += f"; last line: {f['last_line'][:120]}"
            if f.get("awaiting"):
                extra += f"; waiting for {f['awaiting']}"
            self.c.print(f"{ts}   still waiting: {f['what']}, {format_duration(f['elapsed'])}{timeout}{extra}")


class JsonProgress:
    def event(self, kind: str, **f: Any) -> None:
        sys.stdout.write(json.dumps({"event": kind, **f}, default=str) + "\n")
        sys.stdout.flush()


def _progress(as_json: bool) -> Any:
    return JsonProgress() if as_json else LiveProgress(out)


def _finish(run: RunRecord, as_json: bool) -> None:
    from orchestrator.runner import context_summary

    if as_json:
        sys.stdout.write(json.dumps({"event": "summary", **context_summary(run)}) + "\n")
    code = OUTCOME_EXIT.get(run.outcome or "", ExitCode.UNEXPECTED)
    raise typer.Exit(int(code))


def _run_async(coro: Any) -> Any:
    return asyncio.run(coro)


@app.command()
def plan(
    host: str = typer.Argument(..., help="Host name from the inventory, e.g. gpu02"),
    tag: str = typer.Option(..., "--tag", help="compose-files tag to roll out, e.g. v0.0.300"),
    runbook: str = RunbookOpt,
    fmt: str = typer.Option("text", "--format", help="text | markdown | json | mermaid | dot (the state diagram)"),
    compose_file: Optional[Path] = typer.Option(None, "--compose-file", help="Check the runbook against this compose file (the new file)"),
    rollback: Optional[str] = typer.Option(None, "--rollback", help="Plan a standalone rollback instead: r1 | r2 | all"),
    inventory: Optional[Path] = InventoryOpt,
) -> None:
    """Preview every step, request, gate and rollback transition. Offline: never contacts a host."""
    from orchestrator.compose_check import check_against_compose_file
    from orchestrator.inventory import load_inventory
    from orchestrator.runner import check_tag

    check_tag(tag)
    if fmt not in ("text", "markdown", "json", "mermaid", "dot"):
        raise UserError(f"--format {fmt!r} is not one of text, markdown, json, mermaid, dot")
    settings = _settings(inventory)
    inv = load_inventory(settings.inventory)
    entry = inv.host(host)
    rb = load_runbook(runbook)
    if host not in rb.hosts:
        raise UserError(f"runbook {rb.name} is written for {', '.join(rb.hosts)}, not {host}")
    table = compile_rollout(rb) if rollback is None else compile_rollback(rb, rb.rollback_replicas(rollback))
    new_services = None
    checks: list[str] = []
    problems: list[str] = []
    if compose_file is not None:
        checks, problems, new_services = check_against_compose_file(rb, compose_file)
    if fmt in ("mermaid", "dot"):  # the state diagram, generated from the same table (orchestrator/diagram.py)
        from orchestrator.diagram import render_dot, render_mermaid

        sys.stdout.write((render_mermaid if fmt == "mermaid" else render_dot)(table))
        return
    p = build_plan(rb, table, host=host, tag=tag, project=entry.project, new_file_services=new_services)
    p.checks, p.problems = checks, problems
    text = {"text": render_text, "markdown": render_markdown, "json": render_json}[fmt](p)
    sys.stdout.write(text)
    if problems:
        for pr in problems:
            err.print(f"mismatch: {pr}")
        raise typer.Exit(int(ExitCode.UNEXPECTED))


@app.command()
def rollout(
    host: str = typer.Argument(...),
    tag: str = typer.Option(..., "--tag"),
    runbook: str = RunbookOpt,
    yes: bool = typer.Option(False, "--yes", help="Approve manual gates non-interactively"),
    soak: Optional[str] = typer.Option(None, "--soak", help="Override every soak duration (e.g. 30m; 0 skips the wait)"),
    as_json: bool = JsonOpt,
    inventory: Optional[Path] = InventoryOpt,
    server: Optional[str] = ServerOpt,
    server_ca: Optional[Path] = ServerCaOpt,
    continue_: bool = typer.Option(False, "--continue", help="The host is part-way (e.g. r2 moved, r1 not): continue from the "
                                   "phase its state names, after checking it (read-only) against the runbook's host states"),
    skip_tag_age_check: bool = typer.Option(False, "--skip-tag-age-check", help="Go on when GitHub cannot be reached to check "
                                            "that the tag is merged and old enough (journaled in the run)"),
) -> None:
    """Roll HOST to TAG following the runbook, gate by gate, rolling back at a failed gate."""
    if server:
        from orchestrator.server.remote import remote, server_ca as ca, server_token

        raise typer.Exit(remote(server, server_token(), "rollout",
                                {"host": host, "tag": tag, "runbook": runbook, "yes": yes, "soak": soak}, as_json,
                                ca=ca(server_ca)))
    from orchestrator.runner import Session, execute, new_rollout, place_for_continue

    soak_s = parse_soak(soak)
    session = Session.open(_settings(inventory))
    try:
        start_phase = _run_async(place_for_continue(session, host, tag, runbook)) if continue_ else None
        run, rb, table = new_rollout(session, host, tag, runbook, start_phase, skip_tag_age_check=skip_tag_age_check)
        final = _run_async(execute(session, run, rb, table, progress=_progress(as_json), yes=yes, soak=soak_s))
    finally:
        session.close()
    _finish(final, as_json)


@app.command()
def rollback(
    host: str = typer.Argument(...),
    replica: str = typer.Option("all", "--replica", help="r1 | r2 | all (all: r2 first, one replica serving at every moment)"),
    to_tag: Optional[str] = typer.Option(None, "--to-tag"),
    to_file: Optional[str] = typer.Option(None, "--to-file"),
    runbook: Optional[str] = typer.Option(None, "--runbook"),
    as_json: bool = JsonOpt,
    inventory: Optional[Path] = InventoryOpt,
    server: Optional[str] = ServerOpt,
    server_ca: Optional[Path] = ServerCaOpt,
) -> None:
    """Put HOST's replicas back on the previous tag and file, in a safe order."""
    if server:
        from orchestrator.server.remote import remote, server_ca as ca, server_token

        raise typer.Exit(remote(server, server_token(), "rollback", {"host": host, "replica": replica, "to_tag": to_tag,
                                                                     "to_file": to_file, "runbook": runbook}, as_json,
                                ca=ca(server_ca)))
    from orchestrator.runner import Session, execute, new_rollback

    session = Session.open(_settings(inventory))
    try:
        run, rb, table = _run_async(new_rollback(session, host, replica, runbook, to_tag, to_file))
        final = _run_async(execute(session, run, rb, table, progress=_progress(as_json)))
    finally:
        session.close()
    _finish(final, as_json)


@app.command()
def resume(
    run_id: str = typer.Argument(...),
    retry: bool = typer.Option(False, "--retry", help="A halted rollout: start its failed phase again (as a new run)"),
    yes: bool = typer.Option(False, "--yes"),
    soak: Optional[str] = typer.Option(None, "--soak"),
    as_json: bool = JsonOpt,
    inventory: Optional[Path] = InventoryOpt,
    server: Optional[str] = ServerOpt,
    server_ca: Optional[Path] = ServerCaOpt,
) -> None:
    """Continue a run after a crash (no mutating call whose outcome is journaled is sent again)."""
    if server:
        from orchestrator.server.remote import remote, server_ca as ca, server_token

        raise typer.Exit(remote(server, server_token(), "resume",
                                {"run_id": run_id, "retry": retry, "yes": yes, "soak": soak}, as_json,
                                ca=ca(server_ca)))
    from orchestrator.runner import Session, execute, retry_run, table_for

    soak_s = parse_soak(soak)
    session = Session.open(_settings(inventory))
    try:
        run = _get_run(session, run_id)
        if retry:
            run, rb, table = retry_run(session, run)
        else:
            if run.terminal:
                out.print(f"run {run.run_id} already ended {run.outcome}: {run.message or ''}")
                _finish(run, as_json)
            rb = load_runbook(run.runbook)
            table = table_for(run, rb)
        final = _run_async(execute(session, run, rb, table, progress=_progress(as_json), yes=yes, soak=soak_s))
    finally:
        session.close()
    _finish(final, as_json)


def _get_run(session: Any, run_id: str) -> RunRecord:
    try:
        return session.journal.get_run(run_id)
    except RunNotFound:
        raise UserError(f"no run {run_id!r} in {session.settings.journal_location()}: `orchestrate runs` lists them") from None


@app.command()
def status(
    run_id: Optional[str] = typer.Argument(None),
    as_json: bool = JsonOpt,
    inventory: Optional[Path] = InventoryOpt,
) -> None:
    """Where a run is (default: the newest), its transitions and effects."""
    from orchestrator.runner import Session, context_summary, table_for

    session = Session.open(_settings(inventory))
    try:
        if run_id is None:
            runs = session.journal.list_runs(limit=1)
            if not runs:
                raise UserError("no runs journaled yet")
            run = runs[0]
        else:
            run = _get_run(session, run_id)
        transitions = session.journal.transitions(run.run_id)
        effects = session.journal.effects(run.run_id)
        if as_json:
            sys.stdout.write(json.dumps({**context_summary(run),
                                         "transitions": [[t.from_state, t.event, t.to_state, t.note] for t in transitions],
                                         "effects": [{"step": e.step, "kind": e.kind, "mutating": e.mutating,
                                                      "status": (e.outcome or {}).get("status")} for e in effects]}, default=str) + "\n")
            return
        rb = load_runbook(run.runbook)
        table = table_for(run, rb)
        out.print(f"run [bold]{run.run_id}[/bold] {run.kind} of {run.host} to {run.tag}: [bold]{run.outcome or run.state}[/bold]")
        if run.message:
            out.print(run.message)
        visited = {t.from_state: t.event for t in transitions}
        for sid in table.order:
            node = table.nodes[sid]
            mark = {"ok": "[green]x[/green]", "skip": "[green]-[/green]", "fail": "[red]![/red]", "halt": "[red]![/red]",
                    "abort": "[yellow]a[/yellow]", "retry": "[yellow]r[/yellow]"}.get(visited.get(sid, ""), " ")
            if sid == run.state and not run.terminal:
                mark = "[cyan]>[/cyan]"
            if node.section in ("rollback", "full_rollback") and sid not in visited and sid != run.state:
                continue
            out.print(f"[{mark}] {sid}: {node.step.say if node.step else ''}")
    finally:
        session.close()


@app.command()
def runs(
    host: Optional[str] = typer.Option(None, "--host"),
    as_json: bool = JsonOpt,
    inventory: Optional[Path] = InventoryOpt,
) -> None:
    """List runs, newest first."""
    from orchestrator.runner import Session, context_summary

    session = Session.open(_settings(inventory))
    try:
        items = session.journal.list_runs(host=host, limit=50)
        if as_json:
            sys.stdout.write(json.dumps([context_summary(r) for r in items]) + "\n")
            return
        for r in items:
            out.print(f"{r.run_id}  {r.kind:<8} {r.host:<6} {r.tag or '-':<10} {r.outcome or r.state:<28} {r.updated_at:%Y-%m-%d %H:%M}")
    finally:
        session.close()


@app.command()
def approve(
    run_id: str = typer.Argument(...),
    gate: str = typer.Option("*", "--gate", help="Which soak/approval state (default: any)"),
    inventory: Optional[Path] = InventoryOpt,
    server: Optional[str] = ServerOpt,
    server_ca: Optional[Path] = ServerCaOpt,
) -> None:
    """End a soak's approval gate for RUN_ID."""
    if server:
        from orchestrator.server.remote import remote, server_ca as ca, server_token

        raise typer.Exit(remote(server, server_token(), "approve", {"run_id": run_id, "gate": gate}, False,
                                ca=ca(server_ca)))
    from orchestrator import commands
    from orchestrator.runner import Session, owner_id

    session = Session.open(_settings(inventory))
    try:
        run = _get_run(session, run_id)
        gates = None if run.terminal else commands.run_gates(run, lambda: load_runbook(run.runbook))
        out.print(commands.approve(session.journal, run, gate, owner_id(), gates))
    finally:
        session.close()


@app.command()
def abort(
    run_id: str = typer.Argument(...),
    inventory: Optional[Path] = InventoryOpt,
    server: Optional[str] = ServerOpt,
    server_ca: Optional[Path] = ServerCaOpt,
) -> None:
    """Ask RUN_ID to take its current phase's rollback (the whole-host rollback once r2 has moved)."""
    if server:
        from orchestrator.server.remote import remote, server_ca as ca, server_token

        raise typer.Exit(remote(server, server_token(), "abort", {"run_id": run_id}, False, ca=ca(server_ca)))
    from orchestrator import commands
    from orchestrator.runner import Session, owner_id

    session = Session.open(_settings(inventory))
    try:
        out.print(commands.abort(session.journal, _get_run(session, run_id), owner_id()).message)
    finally:
        session.close()


app.add_typer(serve_app, name="serve")  # `orchestrate serve`, `orchestrate serve token add` (server/cli.py)


@app.command()
def demo(
    fault: list[str] = typer.Option([], "--fault", help="Inject a named fault (repeatable); see --list-faults"),
    speed: float = typer.Option(600.0, "--speed", help="Simulated seconds per real second"),
    list_faults: bool = typer.Option(False, "--list-faults"),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", help="Where the demo's journal and logs go"),
    as_json: bool = JsonOpt,
) -> None:
    """A full gpu02 rollout against a built-in simulated gpu02 (no infrastructure needed)."""
    from orchestrator.demo import list_fault_table, run_demo

    if list_faults:
        out.print(list_fault_table())
        return
    outcome = run_demo(faults=fault, speed=speed, state_dir=state_dir, progress=_progress(as_json), console=out if not as_json else None)
    raise typer.Exit(int(OUTCOME_EXIT.get(outcome, ExitCode.UNEXPECTED)))


def main() -> None:
    try:
        rc = app(standalone_mode=False)
        sys.exit(rc if isinstance(rc, int) else 0)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except UserError as exc:
        err.print(f"orchestrate: {exc}")
        sys.exit(int(exc.code))
    except (typer.BadParameter, typer.Abort) as exc:  # pragma: no cover - click handles most
        err.print(f"orchestrate: {exc}")
        sys.exit(int(ExitCode.BAD_INPUT))
    except Exception as exc:  # noqa: BLE001 - the one place an unexpected error becomes exit 1
        import click

        if isinstance(exc, click.exceptions.UsageError):
            err.print(f"orchestrate: {exc.format_message()}")
            sys.exit(int(ExitCode.BAD_INPUT))
        if isinstance(exc, click.exceptions.ClickException):
            err.print(f"orchestrate: {exc.format_message()}")
            sys.exit(int(ExitCode.BAD_INPUT))
        from orchestrator.executor import RunnerFenced

        if isinstance(exc, RunnerFenced):
            err.print(f"orchestrate: this runner lost its lease and stopped: {exc}")
            sys.exit(int(ExitCode.HALTED))
        err.print(f"orchestrate: unexpected error: {type(exc).__name__}: {exc}")
        sys.exit(int(ExitCode.UNEXPECTED))


if __name__ == "__main__":  # pragma: no cover
    main()
