"""What `orchestrate ... --server URL` does (the client side): `remote` sends one action to a
server and (for rollout, rollback and resume) follows the run, printing what happens, and returns
the exit code the same command would return run locally (orchestrator/util/exit_codes.py).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from rich.console import Console

from orchestrator.journal.audit import cli_actor, summary_lines
from orchestrator.journal.base import AuditEntry
from orchestrator.teamserver.client import FollowResult, ServerAnswer, ServerClient, ServerUnreachable
from orchestrator.teamserver.config import ServerConfig
from orchestrator.teamserver.guards import is_loopback
from orchestrator.util.clock import Clock
from orchestrator.util.exit_codes import ExitCode
from orchestrator.util.user_errors import UserError

SUBMIT_ACTIONS = ("rollout", "rollback", "resume")
ACTIONS = (*SUBMIT_ACTIONS, "approve", "abort", "pause", "continue", "status", "runs")


def server_token() -> str:
    """The client's bearer token: ORCHESTRATOR_SERVER_TOKEN (environment or .env)."""
    return ServerConfig().token.get_secret_value()


def server_ca(given: Path | None = None) -> Path | None:
    """The CA a `--server https://` client pins: `--server-ca`, else ORCHESTRATOR_SERVER_CA."""
    return given if given is not None else ServerConfig().ca


def check_server_url(server_url: str, ca: Path | None) -> str | None:
    """Why `server_url` cannot be used (one line), or None.

    The bearer token goes in every request: over http:// only to this machine (loopback).
    """
    parts = urlsplit(server_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"--server {server_url!r} must be an https:// (or, on this machine, http://) URL"
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        return (f"--server {server_url}: http:// would send the token in cleartext; use https:// "
                f"(the server's --tls-cert, and --server-ca to pin its CA)")
    if ca is not None and parts.scheme != "https":
        return "--server-ca needs an https:// --server URL"
    if ca is not None and not Path(ca).is_file():
        return f"--server-ca {ca}: no such file"
    return None


def _who_lines(run: dict[str, Any]) -> list[str]:
    """`orchestrate status RUN --server URL`: who did what, from the server's audit list."""
    items = []
    for e in run.get("audit") or []:
        try:
            items.append(AuditEntry(e["action"], e["by"], datetime.fromisoformat(e["at"]), e.get("detail")))
        except (KeyError, TypeError, ValueError):
            continue
    return summary_lines(items)


def _clock_text(at: str | None) -> str:
    if not at:
        return "--:--:--"
    try:
        return datetime.fromisoformat(at).astimezone().strftime("%H:%M:%S")
    except ValueError:
        return at[:8]


#: A follower's event (but a transition) as a person reads it: its line after the time, and its style.
_EVENT_LINES: dict[str, tuple[Callable[[dict[str, Any]], str], str | None]] = {
    "step_started": (lambda f: f"{f.get('state')} {f.get('say') or ''}".rstrip(), "bold cyan"),
    "waiting": (lambda f: f"  waiting on: {f.get('gate')}", None),
    "note": (lambda f: f"  note: {f.get('text')}", None),
    "effect": (lambda f: f"  -> {f.get('action') or f.get('kind')} {', '.join(f.get('services') or [])} "
                         f"({f.get('file')}@{f.get('tag')})", None),
    "log_line": (lambda f: f"  {f.get('service')}: {str(f.get('line', ''))[:150]}", "dim"),
}


class _Printer:
    """Human lines (rich, no markup from the server's text) or one JSON object per event."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.out = Console(highlight=False, soft_wrap=True, markup=False)
        self.err = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)

    def json(self, obj: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj, default=str) + "\n")
        sys.stdout.flush()

    def event(self, kind: str, fields: dict[str, Any]) -> None:
        if self.as_json:
            self.json({"event": kind, **fields})
            return
        ts = _clock_text(fields.get("at"))
        if kind == "transition":
            colour = {"ok": "green", "skip": "green", "fail": "red", "halt": "red", "abort": "yellow",
                      "retry": "yellow"}.get(fields["event_name"], "white")
            self.out.print(f"{ts} {fields['state']} ", end="")
            self.out.print(fields["event_name"], style=colour, end="")
            self.out.print(f" -> {fields['to']}" + (f": {fields['note']}" if fields.get("note") else ""))
        elif kind in _EVENT_LINES:
            text, style = _EVENT_LINES[kind]
            self.out.print(f"{ts} {text(fields)}", style=style)

    def answer(self, obj: dict[str, Any], text: Callable[[], str], style: str | None = None) -> None:
        """`obj` as JSON, or `text()` for a person (built only then: a JSON answer may lack its fields)."""
        if self.as_json:
            self.json(obj)
        else:
            self.line(text(), style=style)

    def error(self, message: str) -> None:
        self.err.print(f"orchestrate: {message}")

    def line(self, text: str, style: str | None = None) -> None:
        self.out.print(text, style=style)


def _summary(run: dict[str, Any]) -> dict[str, Any]:
    keys = ("run_id", "host", "kind", "tag", "runbook", "state", "outcome", "message", "created_at", "updated_at",
            "parent_run_id")
    return {k: run.get(k) for k in keys}


def _finish(p: _Printer, result: FollowResult) -> int:
    run = result.run
    run_id = run.get("run_id")
    if result.reason == "terminal":
        outcome = run.get("outcome") or ""
        p.answer({"event": "summary", **_summary(run)}, lambda: f"{outcome} {run.get('message') or ''}".rstrip(),
                 style="bold green" if outcome == "DONE" else "bold red")
        from orchestrator.service.oncall import exit_code

        return exit_code(run.get("kind"), outcome)  # a rollback that reached its target: 0
    worker = run.get("worker") or {}
    if result.reason == "stopped":
        message = f"the server stopped run {run_id}: {worker.get('error') or worker.get('status')}"
        code = ExitCode.ABORTED if worker.get("status") == "refused" else ExitCode.UNEXPECTED
    else:
        message = (f"run {run_id} is unfinished (state {run.get('state')}) and no runner holds its lease: "
                   f"`orchestrate resume {run_id}` (here, on a server with --server, or from any machine on the journal)")
        code = ExitCode.HALTED
    if p.as_json:
        p.json({"event": "summary", **_summary(run), "stopped": result.reason, "error": message})
    p.error(message)
    return int(code)


async def _remote(client: ServerClient, p: _Printer, action: str, payload: dict[str, Any], interval: float) -> int:
    if action in SUBMIT_ACTIONS:
        run_id = await client.submit({"action": action, **payload, "by": cli_actor()})
        p.answer({"event": "submitted", "run_id": run_id, "server": client.base_url},
                 lambda: f"run {run_id} submitted to {client.base_url}; it runs there whether or not this command stays "
                 f"(Ctrl-C stops following, not the run)")
        try:
            result = await client.follow(run_id, p.event, interval=interval)
        except ServerUnreachable as exc:
            # the run was accepted and goes on (or waits) there: a human must look, as after a halt
            p.error(f"{exc}; run {run_id} was submitted and may still be running there: follow it with "
                    f"`orchestrate status {run_id} --server {client.base_url}` once the server answers")
            return int(ExitCode.HALTED)
        return _finish(p, result)
    run_id = str(payload.get("run_id") or "")
    if action in ("approve", "abort", "pause", "continue", "status") and not run_id:
        raise UserError(f"{action} needs a run id")
    if action == "approve":
        res = await client.approve(run_id, (str(payload["gate"]) if payload.get("gate") else None), by=cli_actor(), now=bool(payload.get("now")))
        p.answer(res, lambda: f"approved {res['gate']} of {run_id}")
    elif action in ("pause", "continue", "abort"):
        res = await client.signal(run_id, action, by=cli_actor())
        p.answer(res, lambda: res["message"])
    elif action == "status":
        run = await client.run(run_id)
        if p.as_json:
            p.json(run)
        else:
            p.line(f"run {run['run_id']} {run['kind']} of {run['host']} to {run['tag']}: {run['outcome'] or run['state']}")
            if run.get("message"):
                p.line(run["message"])
            for line in _who_lines(run):
                p.line(line)
            for t in run.get("transitions", []):
                p.event("transition", {"state": t["from"], "event_name": t["event"], "to": t["to"], "note": t["note"],
                                       "at": t["at"]})
    else:  # runs
        runs = await client.runs(host=payload.get("host"), limit=int(payload.get("limit") or 50))
        if p.as_json:
            p.json({"runs": runs})
        else:
            for r in runs:
                p.line(f"{r['run_id']}  {r['kind']:<8} {r['host']:<6} {r['tag'] or '-':<10} "
                       f"{r['outcome'] or r['state']:<28} {str(r['updated_at'])[:16].replace('T', ' ')}")
    return int(ExitCode.DONE)


def remote(server_url: str, token: str, action: str, payload: dict[str, Any], as_json: bool, *,
           transport: httpx.AsyncBaseTransport | None = None, clock: Clock | None = None, interval: float = 1.0,
           ca: Path | None = None) -> int:
    """Send `action` (rollout, rollback, resume, approve, abort, status, runs) to the server at
    `server_url`; return the exit code. `payload` is the request body without "action"
    (approve/abort/status: {"run_id": ..., "gate": ...})."""
    p = _Printer(as_json)
    if action not in ACTIONS:
        p.error(f"unknown remote action {action!r}: one of {', '.join(ACTIONS)}")
        return int(ExitCode.BAD_INPUT)
    problem = check_server_url(server_url, ca)
    if problem is not None:
        p.error(problem)
        return int(ExitCode.BAD_INPUT)

    async def go() -> int:
        async with ServerClient(server_url, token or None, transport=transport, clock=clock, ca=ca) as client:
            return await _remote(client, p, action, payload, interval)

    try:
        return asyncio.run(go())
    except ServerAnswer as exc:
        hint = ("; set ORCHESTRATOR_SERVER_TOKEN to the server's token"
                if exc.status == 401 and "ORCHESTRATOR_SERVER_TOKEN" not in exc.message else "")
        p.error(f"{exc.message}{hint}")
        return exc.exit_code
    except ServerUnreachable as exc:
        if exc.connected and action in SUBMIT_ACTIONS:  # the request may have reached it: a human must look
            p.error(f"{exc}; the server may have accepted the {action}: `orchestrate runs --server {server_url}` "
                    f"shows whether it did, before anything is sent again")
            return int(ExitCode.HALTED)
        # never connected (or a read): the address, or the server's process, is what to fix
        fix = ("check --server-ca (the CA that signed the server's certificate)" if "CERTIFICATE_VERIFY_FAILED" in str(exc)
               else "check --server (is `orchestrate serve` running there?)")
        p.error(f"{exc}; {fix}" + ("; nothing was submitted" if action in SUBMIT_ACTIONS else ""))
        return int(ExitCode.BAD_INPUT)
    except UserError as exc:
        p.error(str(exc))
        return int(exc.code)
    except KeyboardInterrupt:
        p.error("stopped following; the run goes on on the server")
        return int(ExitCode.UNEXPECTED)
