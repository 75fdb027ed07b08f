"""`orchestrate`: the command line. Exit codes: 0 done, 1 unexpected (a bug), 2 bad input or usage,
3 rolled back, 4 halted (a human must act), 5 aborted before any change (or refused), 130 stopped by
Ctrl-C (the run continues with `orchestrate resume RUN`)."""

# The parsing machinery (pip's `cli/`): the root app, lazy command registration, the one error
# path. Each command is a module of orchestrator/cli/commands/ (pip's `commands/`), imported only
# when that command runs (or `--help` lists it): `plan`, `status` and `runs` never load the
# runner, the clients or the server, and `--help`/`--version` load nothing heavy
# (tests/core/test_cli_startup.py pins both). A command parses its arguments into a request for
# the service (orchestrator/service/) and renders what comes back (orchestrator/cli/render.py).

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Optional

import typer
from typer.core import TyperGroup

from orchestrator.util.exit_codes import INTERRUPTED_EXIT, ExitCode
from orchestrator.util.user_errors import UserError

#: Every command, in `--help` order: its name -> its module in orchestrator/cli/commands/.
COMMANDS: dict[str, str] = {
    "plan": "plan", "ci-preview": "ci_preview", "rollout": "rollout", "rollback": "rollback", "resume": "resume",
    "status": "status", "runs": "runs", "approve": "approve", "abort": "abort", "pause": "pause",
    "continue": "continue_", "demo": "demo", "serve": "serve",
}
#: Commands that read only the journal or a runbook, never a host client: they do not load structlog
#: (`plan --live` installs the drop itself).
_NO_CLIENTS = frozenset({"plan", "status", "runs"})


def _plain_help(cmd: Any) -> Any:
    """`--help` shown without a `<bool>` metavar."""
    opt = cmd.get_help_option(typer.Context(cmd))
    if opt is not None:
        opt.metavar = ""
    return cmd


class LazyGroup(TyperGroup):
    """The root group: a command's module is imported when the command is looked up."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in COMMANDS:
            return None
        cmd = self.commands.get(cmd_name)
        if cmd is None:
            module = importlib.import_module(f"orchestrator.cli.commands.{COMMANDS[cmd_name]}")
            from orchestrator.cli.params import light

            cmd = typer.main.get_command(module.app)
            cmd.name = cmd_name
            for c in [cmd, *getattr(cmd, "commands", {}).values()]:
                _plain_help(c)
            self.commands[cmd_name] = light(cmd)
        return cmd


# rich_markup_mode=None: click's plain help (typer's rich help loads rich's markdown and traceback
# modules, ~90 ms, on every `--help`)
app = typer.Typer(cls=LazyGroup, add_completion=False, no_args_is_help=True, help=__doc__,
                  pretty_exceptions_enable=False, rich_markup_mode=None)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("orchestrator")
        except PackageNotFoundError:  # pragma: no cover - running from a source tree
            v = "unknown (not installed)"
        sys.stdout.write(f"orchestrate {v}\n")
        raise typer.Exit(0)


#: Set by `main()` (not under ORCHESTRATOR_DEBUG): `_root` drops log events no run claims.
_drop_unclaimed_logs = False


@app.callback()
def _root(
    ctx: typer.Context,
    _v: bool = typer.Option(False, "--version", help="Print the version and exit", metavar="",
                            is_eager=True, callback=_version),
) -> None:
    if _drop_unclaimed_logs and ctx.invoked_subcommand not in _NO_CLIENTS:
        from orchestrator.engine.run_logs import ensure_configured

        ensure_configured()


def _command() -> Any:
    """The click command behind `app` (its commands load on first look-up: `get_command`)."""
    from orchestrator.cli.params import light

    return light(_plain_help(typer.main.get_command(app)))


def _journal_locked(exc: BaseException) -> bool:
    """SQLite's "database is locked" (or busy) once its busy timeout ran out."""
    import sqlite3

    return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))


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


def _unexpected(exc: Exception) -> int:
    """The one place an unexpected error becomes an exit code and one line."""
    from orchestrator.cli.render import err

    if "pydantic" in sys.modules:  # (never loaded: the error is no ValidationError)
        from pydantic import ValidationError

        if isinstance(exc, ValidationError):  # settings built outside load_settings
            from orchestrator.util.settings import describe_validation_error

            err.print(f"orchestrate: {describe_validation_error(exc)}", markup=False)
            return int(ExitCode.BAD_INPUT)
    if "sqlite3" in sys.modules and _journal_locked(exc):
        # another orchestrate process holds the SQLite journal's write lock past the busy timeout
        # (one stopped with Ctrl-Z, or hung, in the middle of a write): say so, not a traceback
        err.print("orchestrate: the journal is locked by another process (it has held the SQLite write lock for "
                  "over 30 s: a stopped (Ctrl-Z) or hung `orchestrate`; find it with `ps`, let it go on (`fg`) or end "
                  "it); try again once it is released. `orchestrate runs` (reads only) shows where each run is",
                  markup=False)
        return int(ExitCode.BAD_INPUT)
    from orchestrator.hosts.clients.errors import ClientError
    from orchestrator.engine.executor import RunnerFenced

    if isinstance(exc, ClientError):
        # a host system failed while the command read it, before any run acted: nothing changed
        err.print(f"orchestrate: {' '.join(str(exc).split())}; nothing was changed, try again", markup=False)
        return int(ExitCode.ABORTED)
    if isinstance(exc, RunnerFenced):
        err.print(f"orchestrate: this runner lost its lease and stopped: {exc}", markup=False)
        return int(ExitCode.HALTED)
    if os.environ.get("ORCHESTRATOR_DEBUG") == "1":
        import traceback

        traceback.print_exc()
    text = " ".join(str(exc).split())
    err.print(f"orchestrate: unexpected error (a bug): {type(exc).__name__}: {text}", markup=False)
    return int(ExitCode.UNEXPECTED)


def main(argv: Optional[list[str]] = None) -> None:
    """`orchestrate`: `_main`, which always ends in SystemExit. In the `orchestrate` process itself
    (not when a test or the explorer calls `main`), a short read-only command (`plan` offline,
    `status`, `runs`, `--help`, `--version`) then exits without the interpreter's teardown
    (`_exit_now`); anything else, or another thread alive, takes Python's own exit."""
    try:
        _main(argv)
    except SystemExit as exc:
        if argv is None and _the_command_process() and _quick(sys.argv[1:], exc.code):
            _exit_now(exc)
        raise


def _main(argv: Optional[list[str]] = None) -> None:
    """Every way out of `orchestrate` is an exit code and, on an error, one line on stderr: usage
    and input errors exit 2 (`UserError` may say otherwise: 5 for a refusal), a host system that
    failed a read before any run acted 5, Ctrl-C 130, a bug 1 (ORCHESTRATOR_DEBUG=1 adds the traceback). No traceback for anything a user can fix."""
    global _drop_unclaimed_logs
    from orchestrator.cli import render  # the consoles: made on first print
    err, out, told = render.err, render.out, render.INTERRUPT_TOLD
    if not os.environ.get("ORCHESTRATOR_DEBUG"):
        # log events no run claims (a client's retries before a run exists) never reach stdout:
        # a command prints its progress and its one line; a run's events go to its log file.
        # Installed by `_root` once a command is chosen (structlog is not loaded for `--help`)
        _drop_unclaimed_logs = True
    try:
        rc = _command().main(args=argv, prog_name="orchestrate", standalone_mode=False)
        if rc == INTERRUPTED_EXIT and not told:  # typer turns a Ctrl-C into a silent 130
            err.print("orchestrate: stopped by Ctrl-C", markup=False)
        sys.exit(rc if isinstance(rc, int) else 0)
    except typer.Exit as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt) and not told:
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
        sys.exit(_unexpected(exc))


#: What may end without the interpreter's teardown (`entry`): short read-only commands, `--help`, `--version`.
_QUICK_COMMANDS = frozenset({"plan", "status", "runs"})
_QUICK_FLAGS = frozenset({"--help", "-h", "--version"})


def _quick(args: list[str], code: object) -> bool:
    import threading

    if not isinstance(code, (int, type(None))) or threading.active_count() != 1:
        return False
    words = [a for a in args if not a.startswith("-")]
    if not words:
        return bool(args) and set(args) <= _QUICK_FLAGS
    return words[0] in _QUICK_COMMANDS and "--live" not in args


def _the_command_process() -> bool:
    """This process is `orchestrate` itself (the console script, or `python -m orchestrator.cli`),
    not a test or the explorer calling `main` in a process of their own."""
    top = sys.modules.get("__main__")
    spec = getattr(top, "__spec__", None)
    if spec is not None and spec.name == "orchestrator.cli.__main__":
        return True
    return os.path.basename(getattr(top, "__file__", None) or "") in ("orchestrate", "orchestrate-script.py")


def _exit_now(exc: SystemExit) -> None:
    """End a short read-only command without the interpreter's teardown, as mypy's `hard_exit`
    does: freeing one by one every object the command loaded (pydantic's schema machinery and the
    runbook's models, typer) is ~60-70 ms of CPU after the answer is out (issue 25: a first `plan`
    or `status`). Nothing else is skipped: the output is flushed and the atexit handlers run first;
    a flush that fails takes Python's own exit (which reports it as before)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - e.g. a closed pipe
        return
    import atexit

    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(int(exc.code or 0))


__all__ = ["app", "main", "COMMANDS", "INTERRUPTED_EXIT"]
