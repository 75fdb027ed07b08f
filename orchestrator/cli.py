"""`orchestrate`: the command line. Exit codes: 0 done, 1 unexpected (a bug), 2 bad input or usage,
3 rolled back, 4 halted (a human must act), 5 aborted before any change (or refused), 130 stopped by
Ctrl-C (the run continues with `orchestrate resume RUN`)."""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from orchestrator.exit_codes import OUTCOME_EXIT, ExitCode
from orchestrator.names import DEFAULT_RUNBOOK
from orchestrator.outcome import Outcome
from orchestrator.server.cli import serve_app
from orchestrator.user_errors import UserError

if TYPE_CHECKING:
    from rich.console import Console

    from orchestrator.journal.base import RunRecord
    from orchestrator.settings import Settings


class _OnFirstUse:
    """A module imported when one of its attributes is first read (asyncio: 40 ms of start-up)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        import importlib

        return getattr(importlib.import_module(self._name), attr)


asyncio = _OnFirstUse("asyncio")


class _ConsoleOnFirstUse:
    """A rich Console made when first printed to (rich.console is 25 ms of start-up that `--help`,
    plain click help, does not need)."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Any = None

    def __getattr__(self, attr: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return getattr(self._console, attr)


# -- heavy modules load on first use, never at start-up: `orchestrate --help` and `--version` must
# answer at once (pydantic, the runbook schema, the journal, the steps, httpx, prometheus_client and
# the server stay unloaded; tests/core/test_cli_startup.py pins it). Each name below is what
# the commands call; it imports its module when first called.
def parse_soak(*a: Any, **k: Any) -> Any:
    from orchestrator.commands import parse_soak as f
    return f(*a, **k)


def format_duration(*a: Any, **k: Any) -> Any:
    from orchestrator.durations import format_duration as f
    return f(*a, **k)


def compile_rollout(*a: Any, **k: Any) -> Any:
    from orchestrator.machine import compile_rollout as f
    return f(*a, **k)


def compile_rollback(*a: Any, **k: Any) -> Any:
    from orchestrator.machine import compile_rollback as f
    return f(*a, **k)


def build_plan(*a: Any, **k: Any) -> Any:
    from orchestrator.plan import build_plan as f
    return f(*a, **k)


def render_text(*a: Any, **k: Any) -> Any:
    from orchestrator.plan import render_text as f
    return f(*a, **k)


def render_markdown(*a: Any, **k: Any) -> Any:
    from orchestrator.plan import render_markdown as f
    return f(*a, **k)


def render_json(*a: Any, **k: Any) -> Any:
    from orchestrator.plan import render_json as f
    return f(*a, **k)


def load_runbook(*a: Any, **k: Any) -> Any:
    from orchestrator.runbook import load_runbook as f
    return f(*a, **k)


def load_settings(*a: Any, **k: Any) -> Any:
    from orchestrator.settings import load_settings as f
    return f(*a, **k)

#: Exit code of a run stopped by Ctrl-C (128 + SIGINT, the shell's convention).
INTERRUPTED_EXIT = 130
#: Set once a command has said what a Ctrl-C stopped (else main() says it: typer's is silent).
_INTERRUPT_TOLD: list[bool] = []

# rich_markup_mode=None: click's plain help (typer's rich help loads rich's markdown and traceback
# modules, ~90 ms, on every `--help`)
app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__, pretty_exceptions_enable=False,
                  rich_markup_mode=None)
err: Any = _ConsoleOnFirstUse(stderr=True, highlight=False, soft_wrap=True)
out: Any = _ConsoleOnFirstUse(highlight=False, soft_wrap=True)


def _flag(name: str, help: str) -> Any:
    """A real flag: takes no value, and `--help` shows no `<bool>` that invites `--yes true`."""
    return typer.Option(False, name, help=help, metavar="")


InventoryOpt = typer.Option(
    None, "--inventory", metavar="PATH",
    help="Host inventory YAML. Default: $ORCHESTRATOR_INVENTORY, else ./config/hosts.yaml, "
         "else $XDG_CONFIG_HOME/orchestrator/hosts.yaml (~/.config/orchestrator/hosts.yaml)")
RunbookOpt = typer.Option(DEFAULT_RUNBOOK, "--runbook", metavar="NAME|PATH",
                          help="Runbook: a name shipped in runbooks/, or a path to a runbook YAML")
RUN_JSON_HELP = ("Machine output: one JSON object per line on stdout, {\"event\": KIND, ...} for each event "
                 "(run_started, step_started, waiting, log_line, effect, transition, note, run_finished), "
                 "then {\"event\": \"summary\", run_id, host, kind, tag, state, outcome, message, ...}")
JsonOpt = _flag("--json", RUN_JSON_HELP)
ServerOpt = typer.Option(None, "--server", metavar="URL",
                         help="Send this to the `orchestrate serve` at URL instead of running it here (token: $ORCHESTRATOR_SERVER_TOKEN)")
ServerCaOpt = typer.Option(None, "--server-ca", metavar="FILE",
                           help="CA certificate that the --server https:// URL must chain to (default: $ORCHESTRATOR_SERVER_CA)")
HostArg = typer.Argument(..., metavar="HOST", help="Host name from the inventory, e.g. gpu02")
RunIdArg = typer.Argument(..., metavar="RUN_ID", help="Run id, as `orchestrate runs` lists them (e.g. gpu02-20261130T0812-7f3a)")
SoakOpt = typer.Option(None, "--soak", metavar="DURATION",
                       help="Override every soak duration (e.g. 30m, 2h; 0 skips the wait, not the approval)")
YesOpt = _flag("--yes", "Approve the soaks' manual approval gates without waiting for `orchestrate approve`")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("orchestrator")
        except PackageNotFoundError:  # pragma: no cover - running from a source tree
            v = "unknown (not installed)"
        sys.stdout.write(f"orchestrate {v}\n")
        raise typer.Exit(0)


@app.callback()
def _root(
    ctx: typer.Context,
    _v: bool = typer.Option(False, "--version", help="Print the version and exit", metavar="",
                            is_eager=True, callback=_version),
) -> None:
    if _drop_unclaimed_logs and ctx.invoked_subcommand not in _NO_CLIENTS:
        from orchestrator.run_logs import ensure_configured

        ensure_configured()


#: Set by `main()` (not under ORCHESTRATOR_DEBUG): `_root` drops log events no run claims.
_drop_unclaimed_logs = False
#: Commands that read only the journal or a runbook, never a host client: they do not load structlog
#: (`plan --live` installs the drop itself, in `_plan_live`).
_NO_CLIENTS = frozenset({"plan", "status", "runs"})


def _settings(inventory: Optional[Path]) -> Settings:
    """The environment's settings with --inventory; an invalid variable is one UserError line."""
    return load_settings().with_inventory(inventory)


def _runbook(name: str) -> Any:
    """Load a runbook before anything else happens (a missing or binary file: one line, exit 2)."""
    try:
        return load_runbook(name)
    except UnicodeDecodeError as exc:
        raise UserError(f"runbook {name} is not UTF-8 text (byte {exc.start}); pass a runbook YAML") from None


class LiveProgress:
    """Human progress: the current step, elapsed time, the gate being waited on, the last
    interesting log line, each step's outcome. Long waits also show their length on the run's
    clock (in the demo, simulated time: a 50-minute cold start takes seconds)."""

    def __init__(self, console: Console) -> None:
        self.c = console
        self.t0 = time.monotonic()
        self.step_clock = 0.0
        self.run: RunRecord | None = None  # set by _execute: the run whose end is printed (oncall.final_lines)
        self.replicas: list[str] = []

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
            if self.run is None:
                self.c.print(f"{ts} [bold {colour}]{f['outcome']}[/bold {colour}] {f.get('message') or ''}")
                return
            from orchestrator.oncall import final_lines

            first, *rest = final_lines(self.run, self.replicas, outcome=f["outcome"], message=f.get("message") or "")
            self.c.print(f"{ts} [bold {colour}]{first}[/bold {colour}]")
            for line in rest:
                self.c.print(line, markup=False)
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
            if f.get("so_far"):
                extra += f"; so far: {f['so_far']}"
            self.c.print(f"{ts}   still waiting: {f['what']}, {format_duration(f['elapsed'])}{timeout}{extra}")


class JsonProgress:
    def event(self, kind: str, **f: Any) -> None:
        sys.stdout.write(json.dumps({"event": kind, **f}, default=str) + "\n")
        sys.stdout.flush()


def _progress(as_json: bool) -> Any:
    return JsonProgress() if as_json else LiveProgress(out)


def _finish(run: RunRecord, as_json: bool) -> None:
    from orchestrator.run_info import context_summary

    from orchestrator.oncall import exit_code

    if as_json:
        sys.stdout.write(json.dumps({"event": "summary", **context_summary(run)}) + "\n")
    raise typer.Exit(exit_code(run.kind, run.outcome))


def _first_line(as_json: bool, what: str, settings: Settings) -> None:
    """A mutating command's first line: what it does, with which inventory and journal (stdout;
    with --json, one {"event": "using", ...} object instead)."""
    from orchestrator.oncall import where

    if as_json:
        sys.stdout.write(json.dumps({"event": "using", "what": what, "inventory": settings.inventory_choice().describe(),
                                     "journal": settings.journal_location()}) + "\n")
    else:
        out.print(f"{what} · {where(settings)}", markup=False)


def _record_options(run: RunRecord, *, yes: bool, soak: Optional[str]) -> None:
    from orchestrator.oncall import record_options

    record_options(run, yes=yes, soak=soak)


def _require_real_inventory(settings: Settings, host: str) -> None:
    from orchestrator.oncall import refuse_placeholder_inventory

    refuse_placeholder_inventory(settings, host)


def _journal_locked(exc: BaseException) -> bool:
    """SQLite's "database is locked" (or busy) once its busy timeout ran out."""
    import sqlite3

    return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))


def _run_async(coro: Any) -> Any:
    return asyncio.run(coro)


def _exit_at_once(run: RunRecord, signame: str) -> None:
    """The second Ctrl-C: no more waiting for a safe point."""
    err.print(f"orchestrate: second {signame}: exiting at once; run {run.run_id} may have stopped mid-step: "
              f"`orchestrate resume {run.run_id}` continues it (on this machine its lease is taken over at once)")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(INTERRUPTED_EXIT)


def _execute(session: Any, run: RunRecord, rb: Any, table: Any, **kwargs: Any) -> RunRecord:
    """`runner.execute`, stoppable: the first Ctrl-C (or SIGTERM) cancels the run at its next
    await, where the journal is consistent (its writes are synchronous), `execute` releases the
    lease, and one line says where the run stopped and how to continue; exit 130. A second
    Ctrl-C exits at once."""
    from orchestrator.runner import execute

    if isinstance(kwargs.get("progress"), LiveProgress):
        kwargs["progress"].run, kwargs["progress"].replicas = run, list(rb.replicas)
    stopped_by: list[str] = []

    async def main() -> RunRecord | None:
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(execute(session, run, rb, table, **kwargs))

        def on_signal(signame: str) -> None:
            if stopped_by:
                _exit_at_once(run, signame)
            stopped_by.append(signame)
            task.cancel()

        installed = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, on_signal, "Ctrl-C" if sig == signal.SIGINT else sig.name)
                installed.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread / no signals
                pass
        try:
            return await task
        except asyncio.CancelledError:
            if not stopped_by:
                raise
            return None
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)

    final = asyncio.run(main())
    if final is not None:
        return final
    now = session.journal.get_run(run.run_id)
    if now.terminal:
        return now
    err.print(f"orchestrate: stopped by {stopped_by[0]}: run {now.run_id} ({now.kind} of {now.host}) is at {now.state}, "
              f"lease released; continue with `orchestrate resume {now.run_id}`")
    _INTERRUPT_TOLD.append(True)
    raise typer.Exit(INTERRUPTED_EXIT)


@app.command()
def plan(
    host: Optional[str] = typer.Argument(None, metavar="[HOST]", help="Host name from the inventory, e.g. gpu02 (or --hosts)"),
    tag: str = typer.Option(..., "--tag", metavar="TAG", help="compose-files tag to roll out, e.g. v0.0.300"),
    runbook: Optional[str] = typer.Option(None, "--runbook", metavar="NAME|PATH",
                                          help="Runbook (default: the shipped runbook that names HOST, all of --hosts, "
                                               f"else {DEFAULT_RUNBOOK})"),
    fmt: str = typer.Option("text", "--format", metavar="text|markdown|json|mermaid|dot",
                            help="Output format (mermaid, dot: the state diagram drawn from the transition table)"),
    compose_file: Optional[Path] = typer.Option(None, "--compose-file", metavar="PATH",
                                                help="Check the runbook against this compose file (the new file); exit 1 on a mismatch"),
    rollback: Optional[str] = typer.Option(None, "--rollback", metavar="r1|r2|all", help="Plan a standalone rollback instead"),
    inventory: Optional[Path] = InventoryOpt,
    live: bool = typer.Option(False, "--live", help="Read the host (never change it): env map keys, budget, host state, "
                              "rollback targets, GPUs, model cache, dry runs; ends with a verdict (exit 0, or 5 would refuse)"),
    hosts: Optional[str] = typer.Option(None, "--hosts", metavar="H1,H2,...",
                                        help="Plan a fleet run: the host order and the rules between hosts, then the steps"),
) -> None:
    """Preview every step, request, gate and rollback transition. Offline: never contacts a host
    (needs the inventory only to check HOST exists and name its compose project), unless --live:
    then read-only against the host (no down, no up without dry_run)."""
    from orchestrator.compose_check import check_against_compose_file
    from orchestrator.inventory import load_inventory
    from orchestrator.run_info import check_tag

    check_tag(tag)
    if fmt not in ("text", "markdown", "json", "mermaid", "dot"):
        raise UserError(f"--format {fmt!r} is not one of text, markdown, json, mermaid, dot")
    fleet: list[str] = []
    if hosts is not None:
        from orchestrator.fleet import parse_hosts

        if host is not None:
            raise UserError("give HOST or --hosts, not both")
        if live or rollback is not None:
            raise UserError("--hosts plans a fleet rollout offline: --live and --rollback take one HOST")
        fleet = parse_hosts(hosts)
        host = fleet[0]
    if host is None:
        raise UserError("give a HOST (e.g. gpu02), or --hosts gpu03,gpu04,gpu23 for a fleet run")
    settings = _settings(inventory)
    if live:
        if rollback is not None:
            raise UserError("--live previews a rollout; --rollback plans are offline only")
        if runbook is None:
            from orchestrator.fleet import default_runbook

            runbook = default_runbook(host)
        _plan_live(settings, host, tag, runbook, fmt, compose_file)
        return
    inv = load_inventory(settings.inventory_path())
    for h in fleet:
        inv.host(h)  # an unknown host is named before any runbook is chosen
    if runbook is None:
        from orchestrator.fleet import default_runbook, runbook_for

        runbook = runbook_for(fleet, None).name if fleet else default_runbook(host)
    entry = inv.host(host)
    rb = _runbook(runbook)
    for h in fleet or [host]:
        if h not in rb.hosts:
            raise UserError(f"runbook {rb.name} is written for {', '.join(rb.hosts)}, not {h}")
    table = compile_rollout(rb) if rollback is None else compile_rollback(rb, rb.rollback_replicas(rollback, "--rollback"))
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
    if fleet:
        from orchestrator.plan import fleet_rules

        p.fleet, p.fleet_rules = fleet, fleet_rules(rb, fleet)
    text = {"text": render_text, "markdown": render_markdown, "json": render_json}[fmt](p)
    sys.stdout.write(text)
    if problems:
        for pr in problems:
            err.print(f"mismatch: {pr}")
        raise typer.Exit(int(ExitCode.UNEXPECTED))


def _plan_live(settings: Settings, host: str, tag: str, runbook: str, fmt: str, compose_file: Optional[Path]) -> None:
    """`plan --live`: orchestrator.live_plan, with the inventory's tokens from the settings."""
    from orchestrator.compose_check import check_against_compose_file
    from orchestrator.live_plan import build_live_plan, render_live_json, render_live_markdown, render_live_text
    from orchestrator.run_logs import ensure_configured
    from orchestrator.runner import Session

    ensure_configured()  # client log events are dropped: stdout holds the plan only
    unset = [name for name, tok in (("ORCHESTRATOR_COMPOSE_MANAGER_TOKEN", settings.compose_manager_token),
                                    ("ORCHESTRATOR_DASHBOARD_TOKEN", settings.dashboard_token)) if not tok.get_secret_value()]
    if unset:
        raise UserError(f"plan --live reads the host: set {' and '.join(unset)} (the inventory's tokens)")
    problems: list[str] = []
    checks: list[str] = []
    new_services = None
    if compose_file is not None:
        checks, problems, new_services = check_against_compose_file(load_runbook(runbook), compose_file)
    session = Session.open(settings)
    try:
        lp = _run_async(build_live_plan(session, host, tag, runbook, new_file_services=new_services))
    finally:
        session.close()
    lp.plan.checks, lp.plan.problems = checks, problems
    sys.stdout.write({"text": render_live_text, "markdown": render_live_markdown, "json": render_live_json}[fmt](lp))
    for pr in problems:
        err.print(f"mismatch: {pr}")
    if lp.changed:  # never a silent "nothing was changed": one line naming what changed
        err.print(f"orchestrate: the preview changed real containers: {'; '.join(lp.changed)}", markup=False, soft_wrap=True)
    raise typer.Exit(int(ExitCode.UNEXPECTED) if problems else lp.exit_code)


@app.command("ci-preview")
def ci_preview(
    changed: list[str] = typer.Option([], "--changed", help="A changed file, relative to the repository root (repeatable)"),
    repo: Path = typer.Option(Path("."), "--repo", help="The compose-files checkout the changed files are read from"),
    inventory: Optional[Path] = typer.Option(None, "--inventory", help="Optional host inventory (for each host's compose project)"),
    summary: Optional[Path] = typer.Option(None, "--summary", help="Append the markdown here too (e.g. $GITHUB_STEP_SUMMARY)"),
) -> None:
    """CI for the compose-files repository: the offline plan of every runbook a changed file affects,
    as markdown; exit 1 when a changed file no longer matches a runbook that deploys it."""
    from orchestrator import ci_preview as ci

    md, failures = ci.preview(changed, ci.check_repo(repo), projects=ci.inventory_projects(inventory))
    sys.stdout.write(md)
    if summary is not None:
        with summary.open("a", encoding="utf-8") as fh:
            fh.write(md)
    for f in failures:
        err.print(f"mismatch: {f}")
    raise typer.Exit(int(ExitCode.UNEXPECTED) if failures else 0)


@app.command()
def rollout(
    host: Optional[str] = typer.Argument(None, metavar="[HOST]", help="Host name from the inventory, e.g. gpu02 (or --hosts)"),
    tag: str = typer.Option(..., "--tag", metavar="TAG", help="compose-files tag to roll out (v0.0.N), e.g. v0.0.300"),
    runbook: Optional[str] = typer.Option(None, "--runbook", metavar="NAME|PATH",
                                          help="Runbook: a name shipped in runbooks/, or a path to a runbook "
                                               "YAML. Default: the shipped runbook that names HOST (all of --hosts), else "
                                               f"{DEFAULT_RUNBOOK}"),
    yes: bool = YesOpt,
    soak: Optional[str] = SoakOpt,
    as_json: bool = JsonOpt,
    inventory: Optional[Path] = InventoryOpt,
    server: Optional[str] = ServerOpt,
    server_ca: Optional[Path] = ServerCaOpt,
    continue_: bool = _flag("--continue", "The host is part-way (e.g. r2 moved, r1 not): continue from the phase its state "
                            "names, after checking it (read-only) against the runbook's host states"),
    skip_tag_age_check: bool = _flag("--skip-tag-age-check", "Go on when GitHub cannot be reached to check that the tag is "
                                     "merged and old enough (journaled in the run)"),
    hosts: Optional[str] = typer.Option(None, "--hosts", metavar="H1,H2,...",
                                        help="A fleet run: these hosts one at a time, in this order, each after the previous "
                                             "one ended DONE (its soak passed and was approved); stops at the first that does not"),
    override_prerequisite: list[str] = typer.Option([], "--override-prerequisite", metavar="HOST",
                                                    help="Go on although the runbook's prerequisite on HOST (its run DONE and "
                                                         "soaked) does not hold; by name only, journaled (repeatable)"),
) -> None:
    """Roll HOST (or --hosts, one at a time) to TAG following the runbook, gate by gate, rolling back at a failed gate."""
    if hosts is not None:
        if host is not None:
            raise UserError("give HOST or --hosts, not both")
        if continue_:
            raise UserError("--continue places one host: `orchestrate rollout HOST --continue` for the host that stopped; "
                            "then the fleet command again (hosts at the target end DONE with nothing sent)")
        if server:
            raise UserError("--hosts runs here, not through --server: run the fleet on the machine that holds the journal")
        _rollout_fleet(hosts, tag, runbook, yes=yes, soak=soak, as_json=as_json, inventory=inventory,
                       skip_tag_age_check=skip_tag_age_check, overrides=override_prerequisite)
        return
    if host is None:
        raise UserError("give a HOST (e.g. gpu02), or --hosts gpu03,gpu04,gpu23 for a fleet run")
    if runbook is None:
        from orchestrator.fleet import default_runbook

        runbook = default_runbook(host)
    if server:
        from orchestrator.server.remote import remote, server_ca as ca, server_token

        local_only = [f for f, on in (("--continue", continue_), ("--skip-tag-age-check", skip_tag_age_check),
                                      ("--override-prerequisite", bool(override_prerequisite))) if on]
        if local_only:  # never drop an operator's flag on the way to the server
            raise UserError(f"{', '.join(local_only)} runs here only, not through --server: run it on the machine that "
                            f"holds the journal")
        raise typer.Exit(remote(server, server_token(), "rollout",
                                {"host": host, "tag": tag, "runbook": runbook, "yes": yes, "soak": soak}, as_json,
                                ca=ca(server_ca)))
    from orchestrator.runner import Session, check_tag, new_rollout, place_for_continue

    # every check a user can fail comes before a run exists or a lease is taken
    check_tag(tag)
    soak_s = parse_soak(soak)
    settings = _settings(inventory)
    settings.require_host_tokens("rollout")
    _runbook(runbook)
    if override_prerequisite:  # a typo never passes: only the runbook's prerequisites can be named
        from orchestrator.prerequisites import check_overrides

        check_overrides(load_runbook(runbook).prerequisites, override_prerequisite)
    _require_real_inventory(settings, host)
    _first_line(as_json, f"{host}: rollout to {tag} (runbook {Path(runbook).stem})", settings)
    session = Session.open(settings)
    try:
        start_phase = _run_async(place_for_continue(session, host, tag, runbook)) if continue_ else None
        # admitted with its prerequisites checked and the overrides journaled (orchestrator/admission.py)
        run, rb, table = new_rollout(session, host, tag, runbook, start_phase, skip_tag_age_check=skip_tag_age_check,
                                     overrides=override_prerequisite)
        _record_options(run, yes=yes, soak=soak)
        final = _execute(session, run, rb, table, progress=_progress(as_json), yes=yes, soak=soak_s)
    finally:
        session.close()
    _finish(final, as_json)


def _rollout_fleet(hosts_text: str, tag: str, runbook: Optional[str], *, yes: bool, soak: Optional[str], as_json: bool,
                   inventory: Optional[Path], skip_tag_age_check: bool, overrides: list[str]) -> None:
    """`rollout --hosts`: orchestrator.fleet's rules; each host a normal rollout run."""
    from orchestrator.fleet import Interrupted, parse_hosts, refuse_unmet_prerequisites, run_fleet, runbook_for
    from orchestrator.runner import Session, check_tag, context_summary, new_rollout

    check_tag(tag)
    soak_s = parse_soak(soak)
    hosts = parse_hosts(hosts_text)
    settings = _settings(inventory)
    settings.require_host_tokens("rollout")
    from orchestrator.inventory import load_inventory

    inv = load_inventory(settings.inventory_path())
    for h in hosts:
        inv.host(h)  # an unknown host is named before any runbook is chosen
    rb = runbook_for(hosts, runbook)
    runbook_ref = runbook or rb.name
    session = Session.open(settings)
    try:
        refuse_unmet_prerequisites(rb, session.journal, overrides)
        for h in hosts:
            _require_real_inventory(settings, h)
        _first_line(as_json, f"{', '.join(hosts)}: fleet rollout to {tag} (runbook {rb.name})", settings)

        def announce(host: str, i: int, n: int) -> None:
            if as_json:
                sys.stdout.write(json.dumps({"event": "fleet_host", "host": host, "index": i + 1, "of": n}) + "\n")
            else:
                out.rule(f"fleet {i + 1}/{n}: {host}")

        def one(host: str) -> RunRecord:
            run, rb_, table = new_rollout(session, host, tag, runbook_ref, skip_tag_age_check=skip_tag_age_check,
                                          overrides=overrides)
            _record_options(run, yes=yes, soak=soak)
            try:
                final = _execute(session, run, rb_, table, progress=_progress(as_json), yes=yes, soak=soak_s)
            except typer.Exit as exc:
                if exc.exit_code == INTERRUPTED_EXIT:
                    raise Interrupted(host) from None
                raise
            if as_json:
                sys.stdout.write(json.dumps({"event": "summary", **context_summary(final)}) + "\n")
            return final

        result = run_fleet(hosts, one, announce)
    finally:
        session.close()
    text = result.summary(tag, runbook_ref)
    if as_json:
        sys.stdout.write(json.dumps({"event": "fleet_summary", "outcome": str(result.outcome), "hosts": hosts,
                                     "runs": [r.run_id for r in result.runs], "stopped_at": result.stopped_at,
                                     "not_started": result.not_started, "message": text}) + "\n")
    else:
        (out if result.outcome == Outcome.DONE else err).print(text)
    if result.refused is not None:
        raise typer.Exit(int(result.refused[1].code))
    if result.interrupted is not None:
        _INTERRUPT_TOLD.append(True)
        raise typer.Exit(INTERRUPTED_EXIT)
    raise typer.Exit(int(OUTCOME_EXIT.get(result.outcome, ExitCode.UNEXPECTED)))


@app.command()
def rollback(
    host: str = HostArg,
    replica: str = typer.Option("all", "--replica", metavar="all|r2|r1",
                                help="Which replicas (all: r2 first, one replica serving at every moment)"),
    to_tag: Optional[str] = typer.Option(None, "--to-tag", metavar="TAG",
                                         help="Tag to go back to (with --to-file); default: the previous tag the last rollout journaled, else the action log's"),
    to_file: Optional[str] = typer.Option(None, "--to-file", metavar="FILE",
                                          help="Compose file (repository path) to go back to (with --to-tag), e.g. prod/GLM-5.3-....yaml"),
    runbook: Optional[str] = typer.Option(None, "--runbook", metavar="NAME|PATH",
                                          help="Runbook whose rollback to run (default: the last rollout's runbook)"),
    yes: bool = YesOpt,
    soak: Optional[str] = SoakOpt,
    as_json: bool = JsonOpt,
    inventory: Optional[Path] = InventoryOpt,
    server: Optional[str] = ServerOpt,
    server_ca: Optional[Path] = ServerCaOpt,
) -> None:
    """Put HOST's replicas back on the previous tag and file, in a safe order. Exit 0 when the
    replicas reached that target (3 is a rollout that rolled back)."""
    if server:
        from orchestrator.server.remote import remote, server_ca as ca, server_token

        raise typer.Exit(remote(server, server_token(), "rollback", {"host": host, "replica": replica, "to_tag": to_tag,
                                                                     "to_file": to_file, "runbook": runbook, "yes": yes,
                                                                     "soak": soak}, as_json,
                                ca=ca(server_ca)))
    from orchestrator.runner import Session, check_tag, new_rollback

    if (to_tag is None) != (to_file is None):
        raise UserError("--to-tag and --to-file go together")
    if to_tag is not None:
        check_tag(to_tag)
    soak_s = parse_soak(soak)
    settings = _settings(inventory)
    settings.require_host_tokens("rollback")
    if runbook is not None:
        _runbook(runbook)
    from orchestrator.fleet import default_runbook

    _runbook(runbook or default_runbook(host)).rollback_replicas(replica)  # a wrong --replica is named first
    _require_real_inventory(settings, host)
    session = Session.open(settings)
    try:
        from orchestrator.oncall import rollback_headline

        run, rb, table = _run_async(new_rollback(session, host, replica, runbook, to_tag, to_file))
        _first_line(as_json, rollback_headline(run, rb), settings)
        _record_options(run, yes=yes, soak=soak)
        final = _execute(session, run, rb, table, progress=_progress(as_json), yes=yes, soak=soak_s)
    finally:
        session.close()
    _finish(final, as_json)


@app.command()
def resume(
    run_id: str = RunIdArg,
    retry: bool = _flag("--retry", "A halted rollout: start its failed phase again (as a new run)"),
    yes: bool = YesOpt,
    soak: Optional[str] = SoakOpt,
    as_json: bool = JsonOpt,
    inventory: Optional[Path] = InventoryOpt,
    server: Optional[str] = ServerOpt,
    server_ca: Optional[Path] = ServerCaOpt,
) -> None:
    """Continue a run after a crash or Ctrl-C (no mutating call whose outcome is journaled is sent again)."""
    if server:
        from orchestrator.server.remote import remote, server_ca as ca, server_token

        raise typer.Exit(remote(server, server_token(), "resume",
                                {"run_id": run_id, "retry": retry, "yes": yes, "soak": soak}, as_json,
                                ca=ca(server_ca)))
    from orchestrator.runner import Session, retry_run, table_for
    from orchestrator.startup import ReadSession

    soak_s = parse_soak(soak)
    settings = _settings(inventory)
    reader = ReadSession.open(settings)
    try:
        run = _get_run(reader, run_id)
    finally:
        reader.close()
    if run.terminal and not retry:
        out.print(f"run {run.run_id} already ended {run.outcome}: {run.message or ''}")
        _finish(run, as_json)
    settings.require_host_tokens("resume")
    _require_real_inventory(settings, run.host)
    _runbook(run.runbook)
    from orchestrator.oncall import kept_options

    yes, soak, kept = kept_options(run, yes=yes, soak=soak)
    soak_s = parse_soak(soak)
    _first_line(as_json, f"{run.run_id}: {'retry' if retry else 'resume'} of the {run.kind} of {run.host} at {run.state}; "
                         f"{kept}", settings)
    session = Session.open(settings)
    try:
        run = _get_run(session, run_id)
        if retry:
            run, rb, table = retry_run(session, run)
        else:
            from orchestrator.admission import resume_run

            admitted, rb, table = resume_run(session, run.run_id)  # the one admission path
            session.admitted[run.run_id] = admitted
            run = admitted.run
        _record_options(run, yes=yes, soak=soak)
        final = _execute(session, run, rb, table, progress=_progress(as_json), yes=yes, soak=soak_s)
    finally:
        session.close()
    _finish(final, as_json)


def _get_run(session: Any, run_id: str) -> RunRecord:
    from orchestrator.journal.base import RunNotFound

    try:
        return session.journal.get_run(run_id)
    except RunNotFound:
        raise UserError(f"no run {run_id!r} in {session.settings.journal_location()}: `orchestrate runs` lists them") from None


def _run_view(session: Any, run: RunRecord, tables: dict) -> dict[str, Any]:
    """The run's summary plus what `status`/`runs` print: its activity and its target tag."""
    from orchestrator.activity import run_activity, target_tag
    from orchestrator.run_info import context_summary, table_for

    key = (run.runbook, run.kind, tuple(run.context.get("replicas", ())))

    def table() -> Any:  # loaded only for a running run (approval detection): ended runs need no runbook
        if key not in tables:
            try:
                tables[key] = table_for(run, load_runbook(run.runbook))
            except (UserError, ValueError):  # a runbook since removed: no approval detection
                tables[key] = None
        return tables[key]
    act = run_activity(run, session.journal, table)
    return {**context_summary(run), "target_tag": target_tag(run), "activity": act.label, "activity_detail": act.detail}


@app.command()
def status(
    run_id: Optional[str] = typer.Argument(None, metavar="[RUN_ID]", help="Run id (default: the newest run)"),
    as_json: bool = _flag("--json", "Machine output: one JSON object: the run's summary (run_id, host, kind, tag, "
                                    "target_tag, state, outcome, message, activity, activity_detail, ...), journal, "
                                    "inventory, transitions [[from, event, to, note], ...] and effects [{step, kind, mutating, status}, ...]"),
    inventory: Optional[Path] = InventoryOpt,
) -> None:
    """Where a run is (default: the newest): running, interrupted (its runner is gone),
    waiting for approval, or ended; its steps; which journal and inventory are used."""
    from orchestrator.run_info import table_for
    from orchestrator.startup import ReadSession

    settings = _settings(inventory)
    session = ReadSession.open(settings)
    try:
        if run_id is None:
            runs = session.journal.list_runs(limit=1)
            if not runs:
                raise UserError(f"no runs journaled yet in {settings.journal_location()}")
            run = runs[0]
        else:
            run = _get_run(session, run_id)
        transitions = session.journal.transitions(run.run_id)
        effects = session.journal.effects(run.run_id)
        view = _run_view(session, run, {})
        where = {"journal": settings.journal_location(), "inventory": settings.inventory_choice().describe()}
        if as_json:
            from orchestrator import audit

            items = audit.entries(session.journal, run.run_id)
            view = {**view, "who": audit.summary(items), "audit": [e.to_json() for e in items]}
            sys.stdout.write(json.dumps({**view, **where,
                                         "transitions": [[t.from_state, t.event, t.to_state, t.note] for t in transitions],
                                         "effects": [{"step": e.step, "kind": e.kind, "mutating": e.mutating,
                                                      "status": (e.outcome or {}).get("status")} for e in effects]}, default=str) + "\n")
            return
        rb = load_runbook(run.runbook)
        table = table_for(run, rb)
        tag = view["target_tag"] or "-"
        out.print(f"run [bold]{run.run_id}[/bold] {run.kind} of {run.host} to {tag}: [bold]{run.outcome or run.state}[/bold]",
                  markup=True)
        detail = view["activity_detail"]
        out.print(detail if detail.startswith(view["activity"]) else f"{view['activity']}: {detail}", markup=False)
        if run.message:
            out.print(run.message, markup=False)
        from orchestrator import audit

        for line in audit.summary_lines(audit.entries(session.journal, run.run_id)):
            out.print(line, markup=False)  # who did what (journaled)
        out.print(f"journal: {where['journal']}", markup=False)
        out.print(f"inventory: {where['inventory']}", markup=False)
        visited = {t.from_state: t.event for t in transitions}
        for sid in table.order:
            node = table.nodes[sid]
            mark = {"ok": "[green]x[/green]", "skip": "[green]-[/green]", "fail": "[red]![/red]", "halt": "[red]![/red]",
                    "abort": "[yellow]a[/yellow]", "retry": "[yellow]r[/yellow]", "remedy": "[yellow]m[/yellow]"}.get(visited.get(sid, ""), " ")
            if sid == run.state and not run.terminal:
                mark = "[cyan]>[/cyan]"
            if node.section in ("rollback", "full_rollback", "remedy") and sid not in visited and sid != run.state:
                continue
            out.print(f"[{mark}] {sid}: {node.step.say if node.step else ''}")
    finally:
        session.close()


@app.command()
def runs(
    host: Optional[str] = typer.Option(None, "--host", metavar="HOST", help="Only this host's runs"),
    as_json: bool = _flag("--json", "Machine output: one JSON array of run summaries, newest first (run_id, host, kind, "
                                    "tag, target_tag, state, outcome, message, activity, activity_detail, created_at, "
                                    "updated_at, parent_run_id)"),
    inventory: Optional[Path] = InventoryOpt,
) -> None:
    """List runs, newest first (at most 50): id, kind, host, the tag it goes to (a rollback's is the
    tag it goes back to), state or outcome, activity (running, interrupted, waiting for approval, ended)."""
    from orchestrator.startup import ReadSession

    session = ReadSession.open(_settings(inventory))
    try:
        tables: dict = {}
        items = [_run_view(session, r, tables) for r in session.journal.list_runs(host=host, limit=50)]
        if as_json:
            sys.stdout.write(json.dumps(items) + "\n")
            return
        if not items:
            out.print(f"no runs{' of ' + host if host else ''} in {session.settings.journal_location()}", markup=False)
        for v in items:
            updated = v["updated_at"][:16].replace("T", " ")
            out.print(f"{v['run_id']}  {v['kind']:<8} {v['host']:<6} {v['target_tag'] or '-':<10} "
                      f"{v['outcome'] or v['state']:<28} {v['activity']:<20} {updated}", markup=False)
    finally:
        session.close()


@app.command()
def approve(
    run_id: str = RunIdArg,
    gate: Optional[str] = typer.Option(None, "--gate", metavar="STATE",
                                       help="Which soak/approval state, e.g. r2.soak, or '*' (default: the one it waits at)"),
    now: bool = _flag("--now", "Also end the rest of the soak at once (default: the soak runs its full time)"),
    inventory: Optional[Path] = InventoryOpt,
    server: Optional[str] = ServerOpt,
    server_ca: Optional[Path] = ServerCaOpt,
) -> None:
    """End a soak's approval gate for RUN_ID (journaled: a resumed run never asks again)."""
    if server:
        from orchestrator.server.remote import remote, server_ca as ca, server_token

        raise typer.Exit(remote(server, server_token(), "approve", {"run_id": run_id, "now": now} | ({"gate": gate} if gate else {}), False,
                                ca=ca(server_ca)))
    from orchestrator import commands
    from orchestrator.startup import ReadSession

    session = ReadSession.open(_settings(inventory))
    try:
        run = _get_run(session, run_id)
        gates = None if run.terminal else commands.run_gates(run, lambda: load_runbook(run.runbook))
        from orchestrator.audit import cli_actor

        out.print(commands.approve(session.journal, run, gate, cli_actor(), gates, now=now)  # who: user@machine
                  + f" (journal {session.settings.journal_location()})", markup=False)
        from orchestrator.oncall import nobody_drives

        if (idle := nobody_drives(session.journal, run)) is not None:
            out.print(idle, markup=False)
    finally:
        session.close()


@app.command()
def abort(
    run_id: str = RunIdArg,
    inventory: Optional[Path] = InventoryOpt,
    server: Optional[str] = ServerOpt,
    server_ca: Optional[Path] = ServerCaOpt,
) -> None:
    """Ask RUN_ID to take its current phase's rollback (the whole-host rollback once r2 has moved)."""
    if server:
        from orchestrator.server.remote import remote, server_ca as ca, server_token

        raise typer.Exit(remote(server, server_token(), "abort", {"run_id": run_id}, False, ca=ca(server_ca)))
    from orchestrator import commands
    from orchestrator.startup import ReadSession

    settings = _settings(inventory)
    session = ReadSession.open(settings)
    try:
        from orchestrator.audit import cli_actor

        run = _get_run(session, run_id)
        result = commands.abort(session.journal, run, cli_actor())  # who: user@machine
    finally:
        session.close()
    if result.runner is None:  # nobody drives it: read the host and end it with what is true
        from orchestrator.orphans import end_unowned
        from orchestrator.runner import Session, owner_id

        full = Session.open(settings)
        try:
            ended = _run_async(end_unowned(full, full.journal.get_run(run_id), owner_id()))
        finally:
            full.close()
        if ended is not None:
            out.print(ended + f" (journal {settings.journal_location()})", markup=False)
            return
    out.print(result.message + f" (journal {settings.journal_location()})", markup=False)


@app.command()
def pause(
    run_id: str = RunIdArg,
    inventory: Optional[Path] = InventoryOpt,
    server: Optional[str] = ServerOpt,
    server_ca: Optional[Path] = ServerCaOpt,
) -> None:
    """Hold RUN_ID at its next safe step (never between a down and its replacement's readiness)
    until `orchestrate continue RUN_ID` (journaled, with who asked)."""
    _signal(run_id, "pause", inventory, server, server_ca)


@app.command("continue")
def continue_(
    run_id: str = RunIdArg,
    inventory: Optional[Path] = InventoryOpt,
    server: Optional[str] = ServerOpt,
    server_ca: Optional[Path] = ServerCaOpt,
) -> None:
    """Let a paused RUN_ID go on (journaled, with who asked)."""
    _signal(run_id, "continue", inventory, server, server_ca)


def _signal(run_id: str, action: str, inventory: Optional[Path], server: Optional[str], server_ca: Optional[Path]) -> None:
    if server:
        from orchestrator.server.remote import remote, server_ca as ca, server_token

        raise typer.Exit(remote(server, server_token(), action, {"run_id": run_id}, False, ca=ca(server_ca)))
    from orchestrator import audit, commands
    from orchestrator.startup import ReadSession

    session = ReadSession.open(_settings(inventory))
    try:
        run = _get_run(session, run_id)
        do = commands.pause if action == "pause" else commands.continue_run
        out.print(do(session.journal, run, audit.cli_actor()), markup=False)
    finally:
        session.close()


app.add_typer(serve_app, name="serve")  # `orchestrate serve`, `orchestrate serve token add` (server/cli.py)


@app.command()
def demo(
    fault: list[str] = typer.Option([], "--fault", metavar="NAME[:ARG]",
                                    help="Inject a named fault into the simulator (repeatable); see --list-faults"),
    speed: float = typer.Option(600.0, "--speed", metavar="X", help="Simulated seconds per real second (> 0)"),
    list_faults: bool = _flag("--list-faults", "List the faults, their symptom and the run's expected end, and exit"),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", metavar="DIR",
                                             help="Where the demo's journal and logs go (default: a new temporary directory)"),
    as_json: bool = _flag("--json", "Machine output: one JSON object per line on stdout, {\"event\": KIND, ...} for each "
                                    "event; no summary line (the exit code is the outcome)"),
    base_tier: bool = _flag("--base-tier", "Then the base tier: gpu03, gpu04, gpu23 one at a time (a fleet run), once "
                                           "gpu02 is DONE"),
    runbook: Optional[str] = typer.Option(None, "--runbook", metavar="NAME",
                                          help="A gpu02 runbook the demo simulates (e.g. gpu02-glm53-w4afp8-pdi2-canary: "
                                               "the simulated gpu02 starts as #294 left it)"),
) -> None:
    """A full gpu02 rollout against a built-in simulated gpu02 (no infrastructure needed)."""
    from orchestrator.demo import check_faults, list_fault_table, run_demo

    if list_faults:
        out.print(list_fault_table(), markup=False)
        return
    if not (math.isfinite(speed) and speed > 0):
        raise UserError(f"--speed {speed:g} must be a positive number of simulated seconds per real second (e.g. 600)")
    check_faults(fault, base_tier=base_tier)
    if runbook is not None:
        from orchestrator.demo import check_demo_runbook

        check_demo_runbook(runbook, base_tier=base_tier)
    load_settings()  # an invalid ORCHESTRATOR_* variable: one line now, not a traceback later
    if state_dir is None:  # made here, so that a Ctrl-C can say where the demo's journal is
        import tempfile

        state_dir = Path(tempfile.mkdtemp(prefix="orchestrate-demo-"))
    try:
        outcome = run_demo(faults=fault, speed=speed, state_dir=state_dir, progress=_progress(as_json),
                           console=out if not as_json else None, base_tier=base_tier,
                           **({"runbook": runbook} if runbook is not None else {}))
    except KeyboardInterrupt:
        from orchestrator.oncall import demo_interrupted

        sys.stdout.flush()
        err.print(f"orchestrate: {demo_interrupted(state_dir)}", markup=False)
        _INTERRUPT_TOLD.append(True)
        raise typer.Exit(INTERRUPTED_EXIT) from None
    raise typer.Exit(int(OUTCOME_EXIT.get(outcome, ExitCode.UNEXPECTED)))


# --------------------------------------------------------------------------- the one error path


def _command() -> Any:
    """The click command behind `app`, with every `--help` option shown without a `<bool>`."""
    cmd = typer.main.get_command(app)
    for c in [cmd, *getattr(cmd, "commands", {}).values()]:
        opt = c.get_help_option(typer.Context(c))
        if opt is not None:
            opt.metavar = ""
    return cmd


def _usage_line(exc: Any) -> str:
    """One line for a click usage error: the command, what is wrong, where help is."""
    text = " ".join(exc.format_message().split())
    ctx = getattr(exc, "ctx", None)
    path = ctx.command_path if ctx is not None and ctx.command_path else "orchestrate"
    if "unexpected extra argument" in text and any(w in text.lower() for w in ("(true)", "(false)", "(yes)", "(no)", "(1)", "(0)")):
        text += " (--yes, --json, --retry are flags: give them no value)"
    return f"{path}: {text} (see `{path} --help`)"


def _click_exceptions() -> tuple[type[BaseException], ...]:
    """typer vendors its own click (typer._click), whose exceptions derive from typer.TyperException;
    a separately installed click has its own classes. Both mean a usage error."""
    classes: list[type[BaseException]] = [typer.TyperException]
    click = sys.modules.get("click")  # never imported: none of its exceptions was raised (and --help stays fast)
    if click is not None:
        classes.append(click.exceptions.ClickException)
    return tuple(classes)


def main(argv: Optional[list[str]] = None) -> None:
    """Every way out of `orchestrate` is an exit code and, on an error, one line on stderr: usage
    and input errors exit 2 (`UserError` may say otherwise: 5 for a refusal), a host system that
    failed a read before any run acted 5, Ctrl-C 130, a bug 1 (ORCHESTRATOR_DEBUG=1 adds the traceback). No traceback for anything a user can fix."""
    global _drop_unclaimed_logs
    if not os.environ.get("ORCHESTRATOR_DEBUG"):
        # log events no run claims (a client's retries before a run exists) never reach stdout:
        # a command prints its progress and its one line; a run's events go to its log file.
        # Installed by `_root` once a command is chosen (structlog is not loaded for `--help`)
        _drop_unclaimed_logs = True
    try:
        rc = _command().main(args=argv, prog_name="orchestrate", standalone_mode=False)
        if rc == INTERRUPTED_EXIT and not _INTERRUPT_TOLD:  # typer turns a Ctrl-C into a silent 130
            err.print("orchestrate: stopped by Ctrl-C", markup=False)
        sys.exit(rc if isinstance(rc, int) else 0)
    except typer.Exit as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt) and not _INTERRUPT_TOLD:
            err.print("orchestrate: stopped by Ctrl-C", markup=False)
        sys.exit(exc.exit_code)
    except UserError as exc:
        err.print(f"orchestrate: {exc}", markup=False)
        sys.exit(int(exc.code))
    except _click_exceptions() as exc:
        if type(exc).__name__ == "NoArgsIsHelpError" and getattr(exc, "ctx", None) is not None:
            out.print(exc.ctx.get_help(), markup=False)  # type: ignore[attr-defined]
            err.print("orchestrate: a command is needed (listed above)", markup=False)
        else:
            err.print(_usage_line(exc), markup=False)
        sys.exit(int(ExitCode.BAD_INPUT))
    except typer.Abort:
        err.print("orchestrate: aborted", markup=False)
        sys.exit(int(ExitCode.BAD_INPUT))
    except KeyboardInterrupt:
        err.print("orchestrate: stopped by Ctrl-C", markup=False)
        sys.exit(INTERRUPTED_EXIT)
    except Exception as exc:  # noqa: BLE001 - the one place an unexpected error becomes exit 1
        if "pydantic" in sys.modules:  # (never loaded: the error is no ValidationError)
            from pydantic import ValidationError

            if isinstance(exc, ValidationError):  # settings built outside load_settings
                from orchestrator.settings import describe_validation_error

                err.print(f"orchestrate: {describe_validation_error(exc)}", markup=False)
                sys.exit(int(ExitCode.BAD_INPUT))
        if "sqlite3" in sys.modules and _journal_locked(exc):
            # another orchestrate process holds the SQLite journal's write lock past the busy timeout
            # (one stopped with Ctrl-Z, or hung, in the middle of a write): say so, not a traceback
            err.print("orchestrate: the journal is locked by another process (it has held the SQLite write lock for "
                      "over 30 s: a stopped (Ctrl-Z) or hung `orchestrate`; find it with `ps`, let it go on (`fg`) or end "
                      "it); try again once it is released. `orchestrate runs` (reads only) shows where each run is",
                      markup=False)
            sys.exit(int(ExitCode.BAD_INPUT))
        from orchestrator.clients.errors import ClientError
        from orchestrator.executor import RunnerFenced

        if isinstance(exc, ClientError):
            # a host system failed while the command read it, before any run acted: nothing changed
            err.print(f"orchestrate: {' '.join(str(exc).split())}; nothing was changed, try again", markup=False)
            sys.exit(int(ExitCode.ABORTED))
        if isinstance(exc, RunnerFenced):
            err.print(f"orchestrate: this runner lost its lease and stopped: {exc}", markup=False)
            sys.exit(int(ExitCode.HALTED))
        if os.environ.get("ORCHESTRATOR_DEBUG") == "1":
            import traceback

            traceback.print_exc()
        text = " ".join(str(exc).split())
        err.print(f"orchestrate: unexpected error (a bug): {type(exc).__name__}: {text}", markup=False)
        sys.exit(int(ExitCode.UNEXPECTED))


if __name__ == "__main__":  # pragma: no cover
    main()
