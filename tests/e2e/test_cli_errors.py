"""Every usage or input error is one line on stderr naming what to fix, exit 2, no traceback, and
leaves nothing behind: no run created, no host leased (issue 14, "On-call at 3 a.m.").

Each case runs `orchestrate` as its own process, from a directory with no config/ (so nothing is
found by accident), with dummy host tokens (so only the case's own fault can fail it) and the
repository's inventory through ORCHESTRATOR_INVENTORY unless the case says otherwise. Nothing here
reaches a host: every case must fail before the first request.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = ROOT / "config" / "hosts.yaml"
TOKENS = {
    "ORCHESTRATOR_COMPOSE_MANAGER_TOKEN": "cm-token-for-the-error-tests",
    "ORCHESTRATOR_DASHBOARD_TOKEN": "dash-token-for-the-error-tests",
    "ORCHESTRATOR_MODEL_PROXY_TOKEN": "mp-token-for-the-error-tests",
    "ORCHESTRATOR_INFERENCE_TOKEN": "inf-token-for-the-error-tests",
}
ROLLOUT = ["rollout", "gpu02", "--tag", "v0.0.300", "--yes"]


def _busy_port() -> tuple[socket.socket, int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s, s.getsockname()[1]


# (id, argv, extra env (None value: unset), what the one line must name)
CASES = [
    ("unknown-command", ["nosuch"], {}, "nosuch"),
    ("unknown-option", ["plan", "gpu02", "--tag", "v0.0.300", "--bogus"], {}, "--bogus"),
    ("tag-without-value", ["rollout", "gpu02", "--tag"], {}, "--tag"),
    ("missing-tag", ["rollout", "gpu02"], {}, "--tag"),
    ("flag-given-a-value", ["rollout", "gpu02", "--tag", "v0.0.300", "--yes", "true"], {}, "true"),
    ("json-given-a-value", ["runs", "--json", "false"], {}, "false"),
    ("malformed-tag", ["rollout", "gpu02", "--tag", "300"], {}, "v0.0.N"),
    ("unknown-host", ["rollout", "gpu99", "--tag", "v0.0.300", "--yes"], {}, "gpu99"),
    ("demo-unknown-fault", ["demo", "--fault", "nosuchfault"], {}, "nosuchfault"),
    ("demo-speed-zero", ["demo", "--speed", "0"], {}, "--speed"),
    ("demo-speed-not-a-number", ["demo", "--speed", "fast"], {}, "--speed"),
    ("plan-rollback-foo", ["plan", "gpu02", "--tag", "v0.0.300", "--rollback", "foo"], {}, "--rollback"),
    ("rollback-replica-foo", ["rollback", "gpu02", "--replica", "r3"], {}, "--replica"),
    ("rollback-to-tag-alone", ["rollback", "gpu02", "--to-tag", "v0.0.290"], {}, "--to-file"),
    ("soak-garbage", [*ROLLOUT, "--soak", "soon"], {}, "--soak"),
    ("poll-interval-abc", ROLLOUT, {"ORCHESTRATOR_POLL_INTERVAL": "abc"}, "ORCHESTRATOR_POLL_INTERVAL"),
    ("lease-ttl-negative", ["runs"], {"ORCHESTRATOR_LEASE_TTL": "-5"}, "ORCHESTRATOR_LEASE_TTL"),
    ("binary-inventory", ["plan", "gpu02", "--tag", "v0.0.300"], {"ORCHESTRATOR_INVENTORY": "@binary"}, "not UTF-8"),
    ("missing-inventory", ROLLOUT, {"ORCHESTRATOR_INVENTORY": "@missing"}, "nope.yaml"),
    ("no-inventory-anywhere", ROLLOUT, {"ORCHESTRATOR_INVENTORY": None}, "--inventory"),
    ("binary-runbook", [*ROLLOUT, "--runbook", "@binary"], {}, "not UTF-8"),
    ("mysql-database-url", ROLLOUT, {"ORCHESTRATOR_DATABASE_URL": "mysql://root:hunter2-secret@db/orch"},
     "ORCHESTRATOR_DATABASE_URL"),
    ("empty-dashboard-token", ROLLOUT, {"ORCHESTRATOR_DASHBOARD_TOKEN": ""}, "ORCHESTRATOR_DASHBOARD_TOKEN"),
    ("blank-compose-token", ROLLOUT, {"ORCHESTRATOR_COMPOSE_MANAGER_TOKEN": "  "}, "ORCHESTRATOR_COMPOSE_MANAGER_TOKEN"),
    ("empty-token-on-rollback", ["rollback", "gpu02"], {"ORCHESTRATOR_INFERENCE_TOKEN": ""}, "ORCHESTRATOR_INFERENCE_TOKEN"),
    ("resume-unknown-run", ["resume", "gpu02-20260101T0000-0000"], {}, "orchestrate runs"),
    ("serve-port-99999", ["serve", "--port", "99999"], {"ORCHESTRATOR_SERVER_TOKEN": "server-token-0123456789"}, "--port"),
    ("rollout-no-host", ["rollout", "--tag", "v0.0.300"], {}, "--hosts"),
    ("rollout-host-and-hosts", ["rollout", "gpu03", "--hosts", "gpu04", "--tag", "v0.0.310"], {}, "not both"),
    ("rollout-hosts-repeated", ["rollout", "--hosts", "gpu03,gpu04,gpu03", "--tag", "v0.0.310"], {}, "gpu03"),
    ("rollout-hosts-empty-name", ["rollout", "--hosts", "gpu03,,gpu04", "--tag", "v0.0.310"], {}, "--hosts"),
    ("rollout-hosts-unknown", ["rollout", "--hosts", "gpu03,gpu99", "--tag", "v0.0.310"], {}, "gpu99"),
    ("rollout-hosts-spaces", ["rollout", "--hosts", "gpu03 gpu04", "--tag", "v0.0.310"], {}, "commas"),
    ("plan-hosts-unknown", ["plan", "--hosts", "gpu03,gpu05", "--tag", "v0.0.310"], {}, "gpu05"),
    ("demo-base-fault-on-gpu02", ["demo", "--base-tier", "--fault", "drain-stuck@gpu02"], {}, "base hosts"),
    ("rollout-hosts-wrong-runbook", ["rollout", "--hosts", "gpu03,gpu04", "--tag", "v0.0.310", "--runbook",
                                     "gpu02-glm53-w4afp8-long-context"], {}, "gpu03"),
    ("rollout-hosts-continue", ["rollout", "--hosts", "gpu03,gpu04", "--tag", "v0.0.310", "--continue"], {}, "--continue"),
    ("rollout-override-typo", ["rollout", "--hosts", "gpu03", "--tag", "v0.0.310", "--override-prerequisite", "gpu2"], {},
     "gpu2"),
    ("rollout-single-override-typo", [*ROLLOUT, "--override-prerequisite", "gpu03"], {}, "gpu03"),
    ("rollout-server-override", [*ROLLOUT, "--override-prerequisite", "gpu02", "--server", "https://127.0.0.1:9"],
     {"ORCHESTRATOR_SERVER_TOKEN": "server-token-0123456789"}, "--override-prerequisite"),
    ("rollout-server-continue", [*ROLLOUT, "--continue", "--server", "https://127.0.0.1:9"],
     {"ORCHESTRATOR_SERVER_TOKEN": "server-token-0123456789"}, "--continue"),
    ("demo-base-fault-without-base-tier", ["demo", "--fault", "drain-stuck"], {}, "--base-tier"),
    ("demo-fault-on-a-host-not-simulated", ["demo", "--fault", "oom@gpu04"], {}, "gpu04"),
    ("plan-host-and-hosts", ["plan", "gpu03", "--hosts", "gpu04", "--tag", "v0.0.310"], {}, "not both"),
    ("serve-port-in-use", ["serve", "--port", "@busy"], {"ORCHESTRATOR_SERVER_TOKEN": "server-token-0123456789"}, "--port"),
    ("status-server-no-run", ["status", "--server", "https://127.0.0.1:9"],
     {"ORCHESTRATOR_SERVER_TOKEN": "server-token-0123456789"}, "RUN_ID"),
]


@pytest.mark.parametrize("argv,env,names", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_no_traceback_no_lease(argv, env, names, tmp_path):
    from orchestrator.journal import SqliteJournal

    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\x00\xff\xfe\x89PNG not yaml at all")
    listener, busy = _busy_port()
    subst = {"@binary": str(binary), "@missing": str(tmp_path / "nope.yaml"), "@busy": str(busy)}
    argv = [subst.get(a, a) for a in argv]
    state = tmp_path / "state"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    full_env.update(TOKENS, ORCHESTRATOR_INVENTORY=str(INVENTORY), ORCHESTRATOR_STATE_DIR=str(state))
    for k, v in env.items():
        if v is None:
            full_env.pop(k, None)
        else:
            full_env[k] = subst.get(v, v)
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    try:
        r = subprocess.run([sys.executable, "-m", "orchestrator.cli", *argv], env=full_env, cwd=cwd,
                           capture_output=True, text=True, timeout=120)
    finally:
        listener.close()
    lines = r.stderr.splitlines()
    assert r.returncode == 2, (r.returncode, r.stderr, r.stdout[-500:])
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert names in lines[0], lines[0]
    assert "hunter2-secret" not in r.stderr  # a database URL's password is never echoed
    journal = state / "journal.sqlite3"
    if journal.exists():
        j = SqliteJournal(journal)
        try:
            assert j.held_lease("gpu02") is None, "a run that never started acting holds the host"
            assert j.list_runs() == [], "a run was created although the command was refused"
        finally:
            j.close()


def test_read_only_commands_need_no_inventory_and_no_token(tmp_path):
    """`runs` and `status` read the journal only: no inventory anywhere, no token, exit 0 / 2
    with the journal's location (no runs yet), never a complaint about the inventory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    env["ORCHESTRATOR_STATE_DIR"] = str(tmp_path / "state")
    r = subprocess.run([sys.executable, "-m", "orchestrator.cli", "runs"], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stderr) == (0, "")
    r = subprocess.run([sys.executable, "-m", "orchestrator.cli", "status"], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "no runs journaled yet" in r.stderr and "inventory" not in r.stderr


def test_version_and_flags_without_bool_metavar():
    r = subprocess.run([sys.executable, "-m", "orchestrator.cli", "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("orchestrate ")
    for cmd in ("rollout", "resume", "demo", "runs", "status", "serve"):
        h = subprocess.run([sys.executable, "-m", "orchestrator.cli", cmd, "--help"], capture_output=True, text=True,
                           timeout=60, env={**os.environ, "COLUMNS": "200"})
        assert h.returncode == 0
        assert "<bool>" not in h.stdout, f"`{cmd} --help` invites `--flag true`"


def test_every_argument_and_option_has_help():
    """`--help` documents every argument and option of every command."""
    import typer

    from orchestrator.cli import app

    group = typer.main.get_command(app)
    missing = [f"{name} {p.name}" for name, cmd in group.commands.items() for p in cmd.params
               if not (getattr(p, "help", None) or "").strip()]
    assert missing == []


def test_a_bug_is_exit_1_in_one_line(monkeypatch, capsys, tmp_path):
    """Exit 1 stays for real bugs: an exception nobody expected."""
    from orchestrator import cli
    from orchestrator.service import startup

    monkeypatch.setenv("ORCHESTRATOR_STATE_DIR", str(tmp_path))

    def boom(settings):
        raise RuntimeError("a bug\nover two lines")

    monkeypatch.setattr(startup.ReadSession, "open", classmethod(lambda cls, s: boom(s)))
    with pytest.raises(SystemExit) as exc:
        cli.main(["runs"])
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "RuntimeError" in err and "a bug" in err


def test_a_journal_locked_by_a_stopped_process_is_one_line_exit_2(monkeypatch, capsys, tmp_path):
    """The explorer's `stall` door: a command stopped (Ctrl-Z) inside a journal write holds SQLite's
    write lock; another command's write then fails with "database is locked" after the busy
    timeout. One line naming what to do, exit 2, never a traceback (cli.main: journal.sqlite.is_busy)."""
    import sqlite3

    from orchestrator import cli
    from orchestrator.service import startup

    monkeypatch.setenv("ORCHESTRATOR_STATE_DIR", str(tmp_path))
    db = tmp_path / "held.sqlite3"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")  # the stopped process's open write transaction
    holder.execute("INSERT INTO t VALUES (1)")

    def write(settings):
        other = sqlite3.connect(db, timeout=0.05, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # what admission's transaction does first: it waits, then gives up

    monkeypatch.setattr(startup.ReadSession, "open", classmethod(lambda cls, s: write(s)))
    try:
        with pytest.raises(SystemExit) as exc:
            cli.main(["runs"])
    finally:
        holder.rollback()
        holder.close()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "the journal is locked by another process" in err, err
    assert "Traceback" not in err


def test_an_unreachable_host_system_is_one_line_with_no_retry_noise_on_stdout(tmp_path):
    """Before any run exists, a client's retries are log events no run claims: they are dropped,
    never printed (cli.main -> run_logs.ensure_configured). The error is one line, exit 5."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    closed = s.getsockname()[1]
    s.close()  # nothing listens there: every connection is refused
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text(
        f"dashboard_url: http://127.0.0.1:{closed}\n"
        f"model_proxy_peers: {{peer-a: 'http://127.0.0.1:{closed}'}}\n"
        "hosts:\n  gpu02:\n"
        f"    compose_manager_url: http://127.0.0.1:{closed}\n"
        "    instance_name: gpu02\n    model_proxy_address: 203.0.113.2:8444\n"
        f"    inference_endpoint: http://127.0.0.1:{closed}\n    soak_relay_base_url: http://127.0.0.1\n"
        "    available_ram_gib: 1223\n    available_ram_source: test\n    gpus: 8\n    github_repo: nearai/cvm-compose-files\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    env.update(TOKENS, ORCHESTRATOR_INVENTORY=str(inventory), ORCHESTRATOR_STATE_DIR=str(tmp_path / "state"))
    # --continue reads the host (read-only) before any run exists
    r = subprocess.run([sys.executable, "-m", "orchestrator.cli", "rollout", "gpu02", "--tag", "v0.0.300", "--continue"],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 5, (r.returncode, r.stderr, r.stdout[-500:])
    # stdout: the command's first line (what, which inventory and journal) and nothing else
    assert r.stdout.splitlines() == [f"gpu02: rollout to v0.0.300 (runbook gpu02-glm53-w4afp8-long-context) · inventory "
                                     f"{inventory} (from ORCHESTRATOR_INVENTORY); journal {tmp_path / 'state' / 'journal.sqlite3'}"], \
        r.stdout[-1000:]
    assert len(r.stderr.splitlines()) == 1 and "ConnectError" in r.stderr and "Traceback" not in r.stderr
