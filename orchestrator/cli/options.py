"""The options the commands share, and the small helpers every command module uses."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import typer


def flag(name: str, help: str) -> Any:
    """A real flag: takes no value (click shows no metavar for a flag: no `<bool>` that invites `--yes true`)."""
    return typer.Option(False, name, help=help)


def command_app() -> typer.Typer:
    """The Typer of one command module (click's plain help)."""
    return typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)


InventoryOpt = typer.Option(
    None, "--inventory", metavar="PATH",
    help="Host inventory YAML. Default: $ORCHESTRATOR_INVENTORY, else ./config/hosts.yaml, "
         "else $XDG_CONFIG_HOME/orchestrator/hosts.yaml (~/.config/orchestrator/hosts.yaml)")
JsonOpt = flag("--json", "Machine output: one JSON object per line on stdout, {\"event\": KIND, ...} for each event "
                         "(run_started, step_started, waiting, log_line, effect, transition, note, run_finished), "
                         "then {\"event\": \"summary\", run_id, host, kind, tag, state, outcome, message, ...}")
ServerOpt = typer.Option(None, "--server", metavar="URL",
                         help="Send this to the `orchestrate serve` at URL instead of running it here (token: $ORCHESTRATOR_SERVER_TOKEN)")
ServerCaOpt = typer.Option(None, "--server-ca", metavar="FILE",
                           help="CA certificate that the --server https:// URL must chain to (default: $ORCHESTRATOR_SERVER_CA)")
RunIdArg = typer.Argument(..., metavar="RUN_ID", help="Run id, as `orchestrate runs` lists them (e.g. gpu02-20261130T0812-7f3a)")
SoakOpt = typer.Option(None, "--soak", metavar="DURATION",
                       help="Override every soak duration (e.g. 30m, 2h; 0 skips the wait, not the approval)")
YesOpt = flag("--yes", "Approve the soaks' manual approval gates without waiting for `orchestrate approve`")


def remote(server: str | None, action: str, body: dict[str, Any], as_json: bool, server_ca: Path | None) -> None:
    """With --server: send the command to `orchestrate serve` at `server` instead, and exit with its
    code. Without: return (the command runs here)."""
    if not server:
        return
    # the team server's client (httpx, ~0.2 s of start-up) is imported only with --server
    from orchestrator.teamserver.remote import remote as send
    from orchestrator.teamserver.remote import server_ca as ca
    from orchestrator.teamserver.remote import server_token

    raise typer.Exit(send(server, server_token(), action, body, as_json, ca=ca(server_ca)))


@contextmanager
def signalled_run(action: str, body: dict[str, Any], inventory: Path | None, server: str | None,
                  server_ca: Path | None) -> Iterator[tuple[Any, Any]]:
    """(the journal session, the run) of an operator's signal to `body["run_id"]` (with --server:
    sent there instead)."""
    remote(server, action, body, False, server_ca)
    from orchestrator.service.reads import get_run, load_settings_for
    from orchestrator.service.startup import ReadSession

    with closing(ReadSession.open(load_settings_for(inventory))) as session:
        yield session, get_run(session, body["run_id"])


def signal_app(action: str, signal: Callable[[Any, Any, str], str]) -> typer.Typer:
    """The command of a plain signal to RUN_ID (`pause`, `continue`; help: its COMMANDS summary)."""
    from orchestrator.cli import COMMANDS
    app = command_app()

    @app.command(action, help=COMMANDS[action])
    def command(run_id: str = RunIdArg, inventory: Path | None = InventoryOpt, server: str | None = ServerOpt,
                server_ca: Path | None = ServerCaOpt) -> None:
        from orchestrator.cli.consoles import out
        from orchestrator.journal.audit import cli_actor

        with signalled_run(action, {"run_id": run_id}, inventory, server, server_ca) as (session, run):
            out.print(signal(session.journal, run, cli_actor()), markup=False)

    return app
