"""What the command line says to an on-call engineer at 3 a.m.: a rollback's first line, a run's
last lines (what happened, the host one line per replica, the one command that works next), a
run's exit code, the options a resumed run keeps, and a signal to a run that no process drives.
Formatting only: every fact comes from the run's journal record and the runbook."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.engine.rules.targets import group_targets
from orchestrator.hosts.inventory import load_inventory
from orchestrator.journal import SqliteJournal
from orchestrator.service.activity import INTERRUPTED, run_activity
from orchestrator.util.exit_codes import OUTCOME_EXIT, ExitCode
from orchestrator.util.names import placeholder_hosts
from orchestrator.util.outcome import Outcome
from orchestrator.util.user_errors import UserError

#: What the journaled final message appends (executor/runtime.py `Serving.host_now`).
HOST_NOW = "host now: "
#: Where the run keeps the options it was started with (RunContext.extra: carried unchanged).
OPTIONS_KEY = "cli_options"
WIDTH = 100
_COMMAND = re.compile(r"`(orchestrate [^`]+)`")
_KEEP = "\x00"  # a space inside a `command`: never a line break there (copy-paste whole)


def _wrap(text: str) -> list[str]:
    kept = re.sub(r"`[^`]+`", lambda m: m.group(0).replace(" ", _KEEP), text)
    return [line.replace(_KEEP, " ") for line in
            textwrap.wrap(kept, WIDTH, break_long_words=False, break_on_hyphens=False)]


def exit_code(kind: str | None, outcome: str | None) -> int:
    """A run's exit code. A rollback the operator asked for that reached its target ends
    ROLLED_BACK: that is success (0); 3 stays for a rollout that rolled back."""
    if kind == "rollback" and outcome == Outcome.ROLLED_BACK:
        return int(ExitCode.DONE)
    return int(OUTCOME_EXIT.get(outcome or "", ExitCode.UNEXPECTED))


def rollback_headline(run: Any, rb: Any) -> str:
    """`gpu02: r1, r2 back to <file> @ <tag> (from <where the target came from>)`."""
    ctx = run.context or {}
    replicas = sorted(ctx.get("replicas") or rb.replicas)
    targets = group_targets(rb, ctx.get("previous") or {})
    engines = {(tag, file) for (tag, file), services in targets.items() if any(rb.replica_of(s) for s in services)}
    shown = sorted(engines or targets)
    to = ", ".join(f"{file} @ {tag}" for tag, file in shown) or "the previous configuration"
    source = ctx.get("previous_source") or "the journal"
    return f"{run.host}: {', '.join(replicas)} back to {to} (from {source})"


def never_rolled_out(host: str, journal: str) -> str:
    """The one message for a rollback of a host this journal never rolled out."""
    return (f"{host} was never rolled out by this journal ({journal}); nothing to roll back. If its replicas must go to "
            f"another file and tag anyway: `orchestrate rollback {host} --to-tag TAG --to-file FILE`")


def split_message(message: str) -> tuple[str, str]:
    """(what happened, the `host now:` part without its prefix) of a journaled final message."""
    text = " ".join((message or "").split())
    head, sep, tail = text.rpartition(HOST_NOW)
    if not sep:
        return text, ""
    return head.rstrip(" ."), tail.strip()


def host_parts(host_now: str, replicas: list[str]) -> list[str]:
    """`r1: ...; r2: ...; in the pool: ...` -> one part per replica (and the pool)."""
    heads = [re.escape(r) for r in replicas] + ["in the pool", "NOT in any pool"]
    parts = re.split(r";\s+(?=(?:" + "|".join(heads) + r")\b)", host_now)
    return [p.strip() for p in parts if p.strip()]


def host_lines(host: str, host_now: str, replicas: list[str]) -> list[str]:
    """`host now: r1: ...; r2: ...; in the pool: ...` as one line per replica (and the pool)."""
    if not host_now:
        return []
    if host_now.startswith("unknown"):
        return [f"{host} now: {host_now}"]
    return [f"{host} now:"] + [f"  {p}" for p in host_parts(host_now, replicas)]


def _finish_abort(run: Any, host_now: str, replicas: list[str], retry: str | None) -> tuple[str, str]:
    """(how to finish an operator's abort that halted short of the previous configuration, the
    next command): the whole-host rollback, once a replica serves to carry the tier meanwhile."""
    parts = {p.split(":", 1)[0]: p for p in host_parts(host_now, replicas)}
    empty = [r for r in replicas if "nothing running" in parts.get(r, "")]
    starting = [r for r in replicas if "NOT serving" in parts.get(r, "")]
    rollback = f"orchestrate rollback {run.host}"
    if empty and retry:
        return (f"to finish the abort: `{retry}` brings {', '.join(empty)} up on the new file, then `{rollback}` takes "
                f"the host back (a replica is stopped only while another serves)"), retry
    wait = f"once {', '.join(starting)} serves, " if starting else ""
    return (f"to finish the abort: {wait}`{rollback}` takes the host back to the previous configuration (a replica is "
            f"stopped only while another serves: until then it refuses and changes nothing)"), rollback


def next_command(text: str) -> str | None:
    """The one command the message says works next: the first after "Next:" (one it says cannot
    run is skipped), else the first that is not a read (`status`)."""
    _, sep, after = text.partition("Next:")
    for scope in ((after,) if sep else ()) + (text,):
        for m in _COMMAND.finditer(scope):
            cmd = m.group(1)
            rest = scope[m.end():m.end() + 20]
            if rest.lstrip().startswith("cannot") or cmd.startswith("orchestrate status"):
                continue
            return cmd
    return None


def final_lines(run: Any, replicas: list[str], *, outcome: str | None = None, message: str | None = None) -> list[str]:
    """What a command prints when its run ends (the journal keeps the whole message)."""
    outcome = outcome or run.outcome or ""
    what, now = split_message(message if message is not None else (run.message or ""))
    if outcome == Outcome.DONE and not now:
        return [f"{outcome} {what}".rstrip()]
    if run.kind == "rollback" and outcome == Outcome.ROLLED_BACK:
        where_now = "; ".join(host_lines(run.host, now, replicas)[1:]) if now else "unknown (not read)"
        return [f"{outcome}: the rollback reached its target; the last gate: {what}",
                f"{run.host} now: " + " ".join(where_now.split())]
    lines = _wrap(f"{outcome}: {what}") + host_lines(run.host, now, replicas)
    cmd = next_command(what)
    if outcome == Outcome.HALTED and "aborted by an operator" in what and run.kind == "rollout":
        # an abort that stopped short of the previous configuration: say how to finish it
        how, cmd = _finish_abort(run, now, replicas, cmd if cmd and "--retry" in cmd else None)
        lines += [*_wrap(how), f"next: {cmd}"]
    elif outcome in (Outcome.HALTED, Outcome.ABORTED) and cmd:
        lines.append(f"next: {cmd}")
    elif outcome == Outcome.HALTED:
        lines.append(f"next: `orchestrate status {run.run_id}`, then fix the host by hand")
    return lines


def record_options(run: Any, *, yes: bool, soak: str | None) -> None:
    """Keep the options a run was started with in its context, so that `resume` runs it the same way."""
    run.context[OPTIONS_KEY] = {"yes": bool(yes), **({"soak": soak} if soak is not None else {})}


def kept_options(run: Any, *, yes: bool, soak: str | None) -> tuple[bool, str | None, str]:
    """(yes, soak, a note) for `resume`: the run's own options unless the operator gives them again
    (the operator's value wins); the note says which option was kept, given again, or absent."""
    opts: Mapping[str, Any] = (run.context or {}).get(OPTIONS_KEY) or {}
    run_yes = bool(opts.get("yes") or (run.context or {}).get("yes"))
    run_soak = None if opts.get("soak") is None else str(opts["soak"])
    kept: list[str] = []
    given: list[str] = []
    if soak is None and run_soak is not None:
        soak = run_soak
        kept.append(f"--soak {soak}")
    elif soak is not None:
        given.append(f"--soak {soak}" + ("" if run_soak is None or run_soak == soak else f" (the run had {run_soak})"))
    if not yes and run_yes:
        yes = True
        kept.append("--yes")
    elif yes:
        given.append("--yes")
    parts = [f"keeps the run's own options: {' '.join(kept)} (give them again to override)"] if kept else []
    parts += [f"uses the options given now: {' '.join(given)}"] if given else []
    note = "; ".join(parts) if parts else "the run was started without --soak or --yes and none was given; none kept"
    return yes, soak, note


def nobody_drives(journal: Any, run: Any) -> str | None:
    """The line to add when no process drives `run` (its runner is gone or never started)."""
    if run.terminal:
        return None
    act = run_activity(run, journal)
    if act.label != INTERRUPTED:
        return None
    return (f"no process drives {run.run_id} ({act.detail.split(';')[0]}): nothing happens until "
            f"`orchestrate resume {run.run_id}` continues it")


def refuse_placeholder_inventory(settings: Any, host: str) -> None:
    """A mutating command never uses a placeholder entry (a reserved, never-resolving URL) for
    a real host: one line naming the inventory and what to do (exit 2)."""
    choice = settings.inventory_choice()
    entry = load_inventory(settings.inventory_path()).host(host)
    urls = " ".join(str(v) for v in entry.model_dump().values())
    bad = placeholder_hosts(urls)
    if bad is not None:
        raise UserError(f"inventory {choice.describe()} is a placeholder for {host} ({bad} never resolves): pass "
                        f"--inventory with the fleet's inventory, or put it in ~/.config/orchestrator/hosts.yaml")


def demo_interrupted(state_dir: Any) -> str:
    """What a Ctrl-C did to `orchestrate demo`: where its run was, that nothing real was touched."""
    where = ""
    path = Path(state_dir) / "journal.sqlite3"
    if path.is_file():
        try:
            journal = SqliteJournal(str(path))
            runs = journal.list_runs(limit=1)
            if runs:
                where = f" (run {runs[0].run_id} was at {runs[0].state})"
        except Exception:  # noqa: BLE001 - the message stands without it
            where = ""
    return (f"demo stopped by Ctrl-C{where}. The simulated hosts stopped with it, so there is nothing to resume and "
            f"nothing real was touched. Its journal and run log stay in {state_dir}; `orchestrate demo` starts over")
