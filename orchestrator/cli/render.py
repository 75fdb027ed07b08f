"""How the run commands (`rollout`, `rollback`, `resume`, `demo`) show a run: human and JSON
progress, a command's first line, and the end of a run the service returns (its exit code)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from orchestrator.cli.consoles import INTERRUPT_TOLD, err, out
from orchestrator.journal.base import RunRecord
from orchestrator.service.oncall import final_lines
from orchestrator.service.requests import RunResult
from orchestrator.service.run_info import context_summary
from orchestrator.service.runs import Hooks
from orchestrator.util.durations import format_duration
from orchestrator.util.exit_codes import INTERRUPTED_EXIT
from orchestrator.util.outcome import Outcome
from orchestrator.util.text import shown


def _t(value: Any) -> str:
    """External text (a log line, a host's answer, a note) as text: never markup, never a control."""
    return escape(shown(str(value)))


class LiveProgress:
    """Human progress, one line an event; a long wait also shows its length on the run's clock
    (in the demo, simulated time)."""

    def __init__(self, console: Console) -> None:
        self.c = console
        self.t0 = time.monotonic()
        self.step_clock = 0.0
        self.run: RunRecord | None = None  # the run whose end is printed (oncall.final_lines)
        self.replicas: list[str] = []

    def attach_run(self, run: RunRecord, replicas: list[str]) -> None:
        self.run, self.replicas = run, list(replicas)

    def event(self, kind: str, **f: Any) -> None:
        e = time.monotonic() - self.t0
        ts = f"[dim]{int(e) // 60:02d}:{e % 60:04.1f}[/dim]"
        if kind == "run_started":
            self.c.print(f"{ts} run [bold]{_t(f['run_id'])}[/bold] on {_t(f['host'])} from {_t(f['state'])}")
        elif kind == "step_started":
            self.step_clock = f.get("clock", 0.0)
            self.c.print(f"{ts} [bold cyan]{_t(f['state'])}[/bold cyan] {_t(f.get('say', ''))}")
        elif kind == "waiting":
            self.c.print(f"{ts}   waiting on: {_t(f['gate'])}")
        elif kind == "log_line":
            self.c.print(f"{ts}   [dim]{_t(f['service'])}: {_t(f['line'][:150])}[/dim]")
        elif kind == "effect":
            self.c.print(f"{ts}   -> {_t(f['action'])} {_t(', '.join(f['services']))} ({_t(f['file'])}@{_t(f['tag'])})")
        elif kind == "transition":
            ev = f["event_name"]
            colour = {"ok": "green", "skip": "green", "fail": "red", "halt": "red", "abort": "yellow", "retry": "yellow"}.get(ev, "white")
            waited = f.get("clock", 0.0) - self.step_clock
            took = f" after {format_duration(waited)}" if waited >= 600 else ""
            where = "" if ev == "ok" and not f["to"].isupper() else f" -> {f['to']}"
            self.c.print(f"{ts}   [{colour}]{_t(ev)}[/{colour}]{took}{_t(where)}" + (f": {_t(f['note'])}" if f.get("note") else ""))
        elif kind == "run_finished":
            colour = "green" if f["outcome"] == Outcome.DONE else "red"
            if self.run is None:
                self.c.print(f"{ts} [bold {colour}]{_t(f['outcome'])}[/bold {colour}] {_t(f.get('message') or '')}")
                return
            first, *rest = final_lines(self.run, self.replicas, outcome=f["outcome"], message=f.get("message") or "")
            self.c.print(f"{ts} [bold {colour}]{_t(first)}[/bold {colour}]")
            for line in rest:
                self.c.print(shown(line), markup=False)
        elif kind == "note":
            self.c.print(f"{ts}   note: {_t(f['text'])}")
        elif kind == "heartbeat":
            timeout = f" / {format_duration(f['timeout'])}" if f.get("timeout") else ""
            extra = ("; missing: " + "; ".join(f["missing"])[:200]) if f.get("missing") else ""
            extra += f"; last line: {f['last_line'][:120]}" if f.get("last_line") else ""
            extra += f"; waiting for {f['awaiting']}" if f.get("awaiting") else ""
            extra += f"; so far: {f['so_far']}" if f.get("so_far") else ""
            self.c.print(f"{ts}   still waiting: {_t(f['what'])}, {format_duration(f['elapsed'])}{timeout}{_t(extra)}")


class JsonProgress:
    def event(self, kind: str, **f: Any) -> None:
        sys.stdout.write(json.dumps({"event": kind, **f}, default=str) + "\n")
        sys.stdout.flush()


def progress(as_json: bool) -> Any:
    return JsonProgress() if as_json else LiveProgress(out)


def first_line(as_json: bool, what: str, settings: Any) -> None:
    """A mutating command's first line: what it does, with which inventory and journal."""
    inventory, journal = settings.inventory_choice().describe(), settings.journal_location()
    if as_json:
        sys.stdout.write(json.dumps({"event": "using", "what": what, "inventory": inventory, "journal": journal}) + "\n")
    else:
        out.print(f"{what} · inventory {inventory}; journal {journal}", markup=False)


def summary(run: RunRecord) -> None:
    sys.stdout.write(json.dumps({"event": "summary", **context_summary(run)}) + "\n")


def interrupted(result: RunResult) -> None:
    """Ctrl-C stopped the run at a safe point: where it is, how to continue."""
    now = result.run
    err.print(f"orchestrate: stopped by {result.stopped_by}: run {now.run_id} ({now.kind} of {now.host}) is at {now.state}, "
              f"lease released; continue with `orchestrate resume {now.run_id}`")
    INTERRUPT_TOLD.append(True)


def hooks(as_json: bool) -> Any:
    """The service's hooks for a run command."""
    def fleet_host(host: str, i: int, n: int) -> None:
        if as_json:
            sys.stdout.write(json.dumps({"event": "fleet_host", "host": host, "index": i + 1, "of": n}) + "\n")
        else:
            out.rule(f"fleet {i + 1}/{n}: {host}")

    return Hooks(progress=lambda: progress(as_json), first_line=lambda what, s: first_line(as_json, what, s),
                 fleet_host=fleet_host, host_done=summary if as_json else (lambda run: None),
                 interrupted=interrupted)


def finish(result: RunResult, as_json: bool) -> None:
    if result.interrupted:
        raise typer.Exit(INTERRUPTED_EXIT)
    if result.already_ended:
        run = result.run
        out.print(shown(f"run {run.run_id} already ended {run.outcome}: {run.message or ''}"), markup=False)
    if as_json:
        summary(result.run)
    raise typer.Exit(result.exit_code)
