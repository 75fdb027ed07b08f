"""`orchestrate`: the command line. Exit codes: 0 done, 1 unexpected (a bug), 2 bad input or usage,
3 rolled back, 4 halted (a human must act), 5 aborted before any change (or refused), 130 stopped by
Ctrl-C (the run continues with `orchestrate resume RUN`)."""

# Each command is a module of commands/, imported when it runs; `--help` lists the table's summaries.

from __future__ import annotations

import importlib
import keyword
import os
import sys
import traceback
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from orchestrator.cli.consoles import INTERRUPT_TOLD, err, out
from orchestrator.util.exit_codes import INTERRUPTED_EXIT, ExitCode
from orchestrator.util.user_errors import UserError

#: Every command, in `--help` order, and its summary: the first sentence of its help, the line `orchestrate --help`
#: shows for it (tests/core/test_cli_help.py). Its module in commands/ is its name as a Python name
#: (`ci_preview`; `continue_`: a keyword).
COMMANDS: dict[str, str] = {
    "plan": "Preview every step, request, gate and rollback transition.",
    "ci-preview": "CI for the compose-files repository: the offline plan of every runbook a changed file affects, as "
                  "markdown; exit 1 when a changed file no longer matches a runbook that deploys it.",
    "rollout": "Roll HOST (or --hosts, one at a time) to TAG following the runbook, gate by gate, rolling back at a "
               "failed gate.",
    "rollback": "Put HOST's replicas back on the previous tag and file, in a safe order.",
    "resume": "Continue a run after a crash or Ctrl-C (no mutating call whose outcome is journaled is sent again).",
    "status": "Where a run is (default: the newest): running, interrupted (its runner is gone), waiting for approval, "
              "or ended; its steps; which journal and inventory are used.",
    "runs": "List runs, newest first (at most 50): id, kind, host, the tag it goes to (a rollback's is the tag it goes "
            "back to), state or outcome, activity (running, paused, waiting for approval, interrupted, ended).",
    "approve": "End a soak's approval gate for RUN_ID (journaled: a resumed run never asks again).",
    "abort": "Ask RUN_ID to take its current phase's rollback (the whole-host rollback once r2 has moved).",
    "pause": "Hold RUN_ID at its next safe step (never between a down and its replacement's readiness) until "
             "`orchestrate continue RUN_ID` (journaled, with who asked).",
    "continue": "Let a paused RUN_ID go on (journaled, with who asked).",
    "demo": "A full rollout against built-in simulated hosts (no infrastructure needed): gpu02's by default, or the "
            "--runbook's on its hosts.",
    "serve": "Team mode: accept rollouts over HTTP and run them here.",
}


class LazyGroup(TyperGroup):
    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in COMMANDS:
            return None
        cmd = self.commands.get(cmd_name)
        if cmd is None:
            module_name = cmd_name.replace("-", "_") + ("_" if keyword.iskeyword(cmd_name) else "")
            module = importlib.import_module(f"orchestrator.cli.commands.{module_name}")
            cmd = typer.main.get_command(module.app)
            cmd.name = cmd_name
            self.commands[cmd_name] = cmd
        return cmd

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        with formatter.section("Commands"):
            formatter.write_dl([(name, TyperCommand(name, help=summary).get_short_help_str(limit))
                                for name, summary in COMMANDS.items()])


# rich_markup_mode=None: click's plain help
app = typer.Typer(cls=LazyGroup, add_completion=False, no_args_is_help=True, help=__doc__,
                  pretty_exceptions_enable=False, rich_markup_mode=None)


def _version(value: bool) -> None:
    if value:
        try:
            v = version("orchestrator")
        except PackageNotFoundError:  # pragma: no cover - running from a source tree
            v = "unknown (not installed)"
        sys.stdout.write(f"orchestrate {v}\n")
        raise typer.Exit(0)


#: `main`'s word to `_root` (as the context object): drop the log events no run claims.
_DROP_UNCLAIMED_LOGS = "drop unclaimed log events"


@app.callback()
def _root(
    ctx: typer.Context,
    _v: bool = typer.Option(False, "--version", help="Print the version and exit", is_eager=True, callback=_version),
) -> None:
    if ctx.obj == _DROP_UNCLAIMED_LOGS:
        # structlog is imported once a command runs (~0.1 s that `--help` and `--version` do without)
        from orchestrator.engine.run_logs import ensure_configured

        ensure_configured()


def _command() -> Any:
    return typer.main.get_command(app)


def _usage_line(exc: Any) -> str:
    text = " ".join(exc.format_message().split())
    ctx = getattr(exc, "ctx", None)
    path = ctx.command_path if ctx is not None and ctx.command_path else "orchestrate"
    if "unexpected extra argument" in text and any(w in text.lower() for w in ("(true)", "(false)", "(yes)", "(no)", "(1)", "(0)")):
        text += " (--yes, --json, --retry are flags: give them no value)"
    return f"{path}: {text} (see `{path} --help`)"


def _unexpected(exc: Exception) -> int:
    """An error no command caught as one line and an exit code."""
    # imported on the error path: most of a second of start-up that `--help` never needs
    from pydantic import ValidationError

    from orchestrator.engine.executor import RunnerFenced
    from orchestrator.hosts.clients.errors import ClientError
    from orchestrator.journal.sqlite import is_busy
    from orchestrator.util.settings import describe_validation_error

    if isinstance(exc, ValidationError):  # settings built outside load_settings
        err.print(f"orchestrate: {describe_validation_error(exc)}", markup=False)
        return int(ExitCode.BAD_INPUT)
    if is_busy(exc):  # another process holds the SQLite write lock past the busy timeout
        err.print("orchestrate: the journal is locked by another process (it has held the SQLite write lock for "
                  "over 30 s: a stopped (Ctrl-Z) or hung `orchestrate`; find it with `ps`, let it go on (`fg`) or end "
                  "it); try again once it is released. `orchestrate runs` (reads only) shows where each run is",
                  markup=False)
        return int(ExitCode.BAD_INPUT)
    if isinstance(exc, ClientError):
        err.print(f"orchestrate: {' '.join(str(exc).split())}; nothing was changed, try again", markup=False)
        return int(ExitCode.ABORTED)
    if isinstance(exc, RunnerFenced):
        err.print(f"orchestrate: this runner lost its lease and stopped: {exc}", markup=False)
        return int(ExitCode.HALTED)
    if os.environ.get("ORCHESTRATOR_DEBUG") == "1":
        traceback.print_exc()
    text = " ".join(str(exc).split())
    err.print(f"orchestrate: unexpected error (a bug): {type(exc).__name__}: {text}", markup=False)
    return int(ExitCode.UNEXPECTED)


def main(argv: list[str] | None = None) -> None:
    """`orchestrate`: every way out is an exit code (module docstring) and, on an error, one line on
    stderr; a traceback only for a bug with ORCHESTRATOR_DEBUG=1."""
    # log events no run claims (a client's retries before a run exists) never reach stdout
    obj = None if os.environ.get("ORCHESTRATOR_DEBUG") else _DROP_UNCLAIMED_LOGS
    try:
        rc = _command().main(args=argv, prog_name="orchestrate", standalone_mode=False, obj=obj)
        if rc == INTERRUPTED_EXIT and not INTERRUPT_TOLD:  # typer turns a Ctrl-C into a silent 130
            err.print("orchestrate: stopped by Ctrl-C", markup=False)
        sys.exit(rc if isinstance(rc, int) else 0)
    except typer.Exit as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt) and not INTERRUPT_TOLD:
            err.print("orchestrate: stopped by Ctrl-C", markup=False)
        sys.exit(exc.exit_code)
    except UserError as exc:
        err.print(f"orchestrate: {exc}", markup=False)
        sys.exit(int(exc.code))
    except typer.TyperException as exc:  # typer's own click (typer._click): a usage error
        if type(exc).__name__ == "NoArgsIsHelpError" and getattr(exc, "ctx", None) is not None:
            out.print(exc.ctx.get_help(), markup=False)  # type: ignore[attr-defined]  # click's NoArgsIsHelpError carries ctx; checked above
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
        sys.exit(_unexpected(exc))


__all__ = ["app", "main", "COMMANDS", "INTERRUPTED_EXIT"]
