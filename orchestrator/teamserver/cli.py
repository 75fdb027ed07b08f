"""`orchestrate serve` and `orchestrate serve token add`: the server side of the command line.

Imported by the CLI (orchestrator/cli/) at start-up, so it imports nothing heavy at module level
(starlette and uvicorn load only when a server starts).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from orchestrator.util.exit_codes import ExitCode
from orchestrator.util.user_errors import UserError

if TYPE_CHECKING:  # pydantic-settings loads only when a command reads its settings (`--help` stays fast)
    from orchestrator.util.settings import Settings

serve_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None,
                        help="Team mode: accept rollouts over HTTP and run them here. See docs/team-mode.md.")
token_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True, rich_markup_mode=None,
                        help="Per-operator tokens of `orchestrate serve` (a tokens file).")
serve_app.add_typer(token_app, name="token")

TokensFileOpt = typer.Option(None, "--tokens-file", envvar="ORCHESTRATOR_SERVER_TOKENS_FILE",
                             help="Per-operator tokens (YAML, made by `serve token add`); instead of ORCHESTRATOR_SERVER_TOKEN")


def run_serve(bind: str, port: int, token: str | None, settings: Settings, **options: Any) -> int:
    """`orchestrate serve`: serve until stopped; the exit code. `token` None: ORCHESTRATOR_SERVER_TOKEN.
    `options`: serving.serve's (TLS, tokens file, exposure overrides, adoption, connection caps)."""
    from rich.console import Console

    from orchestrator.hosts.redaction import Redactor
    from orchestrator.journal.base import JournalError
    from orchestrator.teamserver.serving import serve

    err = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)
    try:
        serve(settings, bind, port, token, **options)
    except UserError as exc:
        err.print(f"orchestrate: {exc}")
        return int(exc.code)
    except JournalError as exc:
        err.print("orchestrate: cannot open the journal: " + Redactor(settings.database_password()).scrub(str(exc)))
        return int(ExitCode.BAD_INPUT)  # the environment to fix (ORCHESTRATOR_DATABASE_URL), not a bug
    return int(ExitCode.DONE)


def check_can_listen(bind: str, port: int) -> None:
    """Fail before starting the server, in one line, when the address cannot be bound (uvicorn
    would log several lines and exit 3, the code of "rolled back")."""
    import socket

    if not 1 <= port <= 65535:
        raise UserError(f"--port {port} is not a TCP port: use 1-65535")
    try:
        infos = socket.getaddrinfo(bind, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UserError(f"--bind {bind!r} is not an address to listen on: {exc.strerror}") from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
        try:
            sock.bind(addr)
        except OSError as exc:
            raise UserError(f"cannot listen on {bind}:{port}: {exc.strerror}; pick another --port or stop what listens there") from None


@serve_app.callback(invoke_without_command=True)
def serve(
    ctx: typer.Context,
    bind: str = typer.Option("127.0.0.1", "--bind", envvar="ORCHESTRATOR_SERVER_BIND",
                             help="Address to listen on; not loopback: TLS needed (the image sets 0.0.0.0)"),
    port: int = typer.Option(8000, "--port", metavar="PORT", envvar="ORCHESTRATOR_SERVER_PORT",
                             help="TCP port to listen on (1-65535)"),
    tls_cert: Path | None = typer.Option(None, "--tls-cert", help="Server certificate chain (PEM)"),
    tls_key: Path | None = typer.Option(None, "--tls-key", help="Its private key (PEM)"),
    allowed_host: list[str] = typer.Option([], "--allowed-host",
                                           help="A name clients use to reach this server (repeatable; Host header check)"),
    tokens_file: Path | None = TokensFileOpt,
    protect_metrics: bool = typer.Option(False, "--protect-metrics", help="/metrics and /healthz need a token too"),
    insecure_no_auth: bool = typer.Option(False, "--insecure-no-auth",
                                          help="Serve every route without a token (loopback binds only)"),
    insecure_plaintext: bool = typer.Option(False, "--insecure-plaintext-on-network",
                                            help="Allow a non-loopback bind without TLS (a TLS proxy on this host)"),
    inventory: Path | None = typer.Option(None, "--inventory", help="Host inventory YAML"),
    no_adopt: bool = typer.Option(False, "--no-adopt",
                                  help="Do not adopt runs whose lease expired with no runner (see docs/team-mode.md)"),
    per_address: int = typer.Option(128, "--max-connections-per-address", metavar="N",
                                    help="Connections one client address may hold at once (beyond: 503, closed); "
                                         "raise it for a team behind one NAT address"),
) -> None:
    """Team mode: accept rollouts over HTTP and run them here, so they outlive the laptop that asked.
    Token: $ORCHESTRATOR_SERVER_TOKEN or --tokens-file. See docs/team-mode.md."""
    if ctx.invoked_subcommand is not None:
        return
    from orchestrator.teamserver.serving import check_exposure
    from orchestrator.util.settings import load_settings

    settings = load_settings().with_inventory(inventory)
    # what the command line asks is judged before the port: a refused exposure says so whatever listens there
    check_exposure(bind, tls=tls_cert is not None, insecure_no_auth=insecure_no_auth, insecure_plaintext=insecure_plaintext)
    check_can_listen(bind, port)
    if not 1 <= per_address <= 100_000:
        raise UserError(f"--max-connections-per-address {per_address}: use 1-100000")
    try:
        code = run_serve(bind, port, None, settings, insecure_no_auth=insecure_no_auth, tls_cert=tls_cert,
                         tls_key=tls_key, insecure_plaintext_on_network=insecure_plaintext,
                         allowed_hosts=allowed_host, tokens_file=tokens_file, protect_metrics=protect_metrics,
                         adopt=not no_adopt, max_connections_per_address=per_address)
    except SystemExit as exc:  # uvicorn's startup failure (3): not a rollback
        if exc.code == 3:
            raise UserError(f"the server could not start on {bind}:{port} (uvicorn's reason is above)") from None
        raise
    raise typer.Exit(code)


@token_app.command("add")
def token_add(
    name: str = typer.Argument(..., help="Who the token is for; the journal records this name"),
    role: str = typer.Option("operator", "--role", help="viewer (reads) or operator (submit, approve, abort)"),
    tokens_file: Path | None = TokensFileOpt,
) -> None:
    """Make a token for NAME: prints it once (give it to NAME), stores only its sha256 in the tokens file."""
    from rich.console import Console

    from orchestrator.teamserver.auth import add_token

    if tokens_file is None:
        raise UserError("--tokens-file (or ORCHESTRATOR_SERVER_TOKENS_FILE) names the file to write")
    token = add_token(tokens_file, name, role)
    print(token)
    Console(stderr=True, highlight=False, markup=False).print(
        f"added {role} {name} to {tokens_file}; the token above is not stored anywhere: hand it over now")
