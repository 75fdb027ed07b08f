"""`orchestrate` answers at once (issue 25): what each command may load before it answers.

`--help` and `--version` load typer and nothing heavy: not pydantic (the runbook schema, the
settings), not structlog, httpx, asyncio, prometheus_client, rich's console or the server. The
read-only commands (`plan`, `status`, `runs`) never load the runner, the executor, the clients or
httpx; `runs` loads no runbook for runs that are not running. Each case runs `orchestrate` in a
process of its own and lists the modules it loaded (`python -X importtime` shows the costs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# What `--help`/`--version` must not import (each costs 10-150 ms of start-up)
HEAVY_FOR_HELP = [
    "pydantic", "pydantic_settings", "structlog", "httpx", "asyncio", "prometheus_client", "yaml", "rich.console",
    "click",  # a second copy of click beside typer's own
    "starlette", "uvicorn",
    "orchestrator.language.runbook", "orchestrator.util.settings", "orchestrator.journal", "orchestrator.engine.steps",
    "orchestrator.service.runner", "orchestrator.engine.executor", "orchestrator.hosts.clients", "orchestrator.server.app",
    "orchestrator.engine.run_logs", "orchestrator.previews.plan", "orchestrator.language.machine",
]
# What the read-only commands must not import: pydantic-settings (and the asyncio it loads) nor
# typer's pydantic coercion of parameters (orchestrator/cli/params.py), nor the service's run path
HEAVY_FOR_READS = [
    "httpx", "prometheus_client", "starlette", "uvicorn", "structlog", "tenacity", "pydantic_settings", "asyncio",
    "typer._adapters", "orchestrator.service.runner", "orchestrator.engine.executor", "orchestrator.hosts.clients", "orchestrator.server.app",
    "orchestrator.service.runs", "orchestrator.service.admit", "orchestrator.util.settings",
]
# `runs` reads the journal alone: no pydantic at all, no rich console (its lines are plain text)
HEAVY_FOR_RUNS = ["pydantic", "rich.console", "orchestrator.language.runbook"]

PROBE = """
import json, os, sys
sys.argv = ["orchestrate", *json.loads(sys.argv[1])]
from orchestrator.cli import main
try:
    main()
finally:
    with open(os.environ["MODULES_OUT"], "w") as fh:
        json.dump(sorted(sys.modules), fh)
"""


def _loaded(argv: list[str], tmp_path: Path, **env: str) -> tuple[int, set[str]]:
    out = tmp_path / "modules.json"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    full_env.update(MODULES_OUT=str(out), ORCHESTRATOR_STATE_DIR=str(tmp_path / "state"),
                    ORCHESTRATOR_INVENTORY=str(ROOT / "config" / "hosts.yaml"), **env)
    r = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv)], cwd=tmp_path, env=full_env,
                       capture_output=True, text=True, timeout=120)
    return r.returncode, set(json.loads(out.read_text()))


def _heavy(loaded: set[str], names: list[str]) -> list[str]:
    return sorted(n for n in names if n in loaded or any(m.startswith(n + ".") for m in loaded))


@pytest.mark.parametrize("argv", [["--help"], ["--version"]], ids=["--help", "--version"])
def test_help_and_version_load_nothing_heavy(argv, tmp_path):
    rc, loaded = _loaded(argv, tmp_path)
    assert rc in (0, 2)
    assert "typer" in loaded  # the probe saw the command line itself
    assert _heavy(loaded, HEAVY_FOR_HELP) == []


def _journal_with_runs(tmp_path: Path) -> None:
    from orchestrator.journal import open_journal
    from orchestrator.hosts.redaction import Redactor

    (tmp_path / "state").mkdir()
    j = open_journal(str(tmp_path / "state" / "journal.sqlite3"), redactor=Redactor())
    try:
        for i in range(2):
            j.create_run(host="gpu02", runbook="gpu02-glm53-w4afp8-long-context", tag=f"v0.0.30{i}", kind="rollout",
                         state="preflight", context={})
    finally:
        j.close()


@pytest.mark.parametrize("argv", [["runs"], ["runs", "--json"], ["status", "--json"], ["status"],
                                  ["plan", "gpu02", "--tag", "v0.0.300"]],
                         ids=["runs", "runs-json", "status-json", "status", "plan"])
def test_read_only_commands_load_no_runner_clients_or_httpx(argv, tmp_path):
    _journal_with_runs(tmp_path)
    rc, loaded = _loaded(argv, tmp_path)
    assert rc == 0
    assert _heavy(loaded, HEAVY_FOR_READS) == []


def test_runs_loads_no_runbook_for_runs_that_are_not_running(tmp_path):
    """The runbook is read only to tell a running run waiting for approval; the journal's runs here
    are interrupted (no lease), so `runs` answers from the journal alone."""
    _journal_with_runs(tmp_path)
    rc, loaded = _loaded(["runs"], tmp_path)
    assert rc == 0
    assert "orchestrator.language.runbook" not in loaded and "orchestrator.language.machine" not in loaded


@pytest.mark.parametrize("argv", [["runs"], ["runs", "--json"]], ids=["runs", "runs-json"])
def test_runs_loads_no_pydantic_and_no_rich(argv, tmp_path):
    """`runs` is what on-call types first: settings without pydantic (orchestrator/service/startup.py
    read_settings), parameters without typer's pydantic coercion, plain lines without rich."""
    _journal_with_runs(tmp_path)
    rc, loaded = _loaded(argv, tmp_path)
    assert rc == 0
    assert _heavy(loaded, HEAVY_FOR_RUNS) == []


def test_a_command_loads_only_its_own_module(tmp_path):
    """One module per command (orchestrator/cli/commands/): `status` imports its own, no other."""
    _journal_with_runs(tmp_path)
    rc, loaded = _loaded(["status", "--json"], tmp_path)
    assert rc == 0
    commands = sorted(m for m in loaded if m.startswith("orchestrator.cli.commands."))
    assert commands == ["orchestrator.cli.commands.status"]


def test_a_command_that_reaches_hosts_still_drops_unclaimed_log_events(tmp_path):
    """`--help` no longer loads structlog, but a command that may call a host installs the drop
    before it runs (log events no run claims never reach stdout)."""
    rc, loaded = _loaded(["rollback", "gpu02", "--replica", "r3"], tmp_path,
                         ORCHESTRATOR_COMPOSE_MANAGER_TOKEN="x", ORCHESTRATOR_DASHBOARD_TOKEN="y")
    assert rc == 2
    assert "orchestrator.engine.run_logs" in loaded


# What `status` and `plan` must not load once their results are cached (issue 25: orchestrator/
# service/step_list.py, orchestrator/previews/plan_cache.py): the runbook schema and pydantic,
# rich's console (status prints plain lines to a pipe), the step handlers, the inventory parser.
HEAVY_WHEN_CACHED = ["pydantic", "rich.console", "yaml", "orchestrator.language.runbook", "orchestrator.language.machine",
                     "orchestrator.engine.steps", "orchestrator.previews.plan", "orchestrator.hosts.inventory"]


@pytest.mark.parametrize("argv", [["status"], ["plan", "gpu02", "--tag", "v0.0.300"],
                                  ["plan", "gpu02", "--tag", "v0.0.300", "--format", "json"]],
                         ids=["status", "plan", "plan-json"])
def test_status_and_plan_answer_from_their_cache_without_the_runbook_schema(argv, tmp_path):
    _journal_with_runs(tmp_path)
    rc, first = _loaded(argv, tmp_path)  # computes and keeps the result
    assert rc == 0 and "orchestrator.language.runbook" in first
    rc, loaded = _loaded(argv, tmp_path)
    assert rc == 0
    assert _heavy(loaded, HEAVY_WHEN_CACHED) == []


# What a first `plan HOST` and `status` (nothing cached yet: a first call after install, or after a
# runbook or module changed) must not load (issue 25). `plan` describes each step from
# orchestrator/engine/step_descriptions.py, not from the step handlers (their parsers, clients and
# analysis code); it chooses the host's runbook without the fleet's journal code; the compose-file
# check loads only with --compose-file, rich only to print an error. Neither loads the analysis
# window arithmetic (the schema checks metric names against orchestrator/analysis/metric_defs.py)
# nor getpass (the journal's audit asks for the user's name only when it writes).
HEAVY_FOR_FIRST_PLAN = ["orchestrator.engine.steps", "orchestrator.engine.fleet", "orchestrator.journal",
                        "orchestrator.previews.compose_check", "orchestrator.hosts.compose_file", "rich.console",
                        "orchestrator.analysis.window", "getpass"]
HEAVY_FOR_FIRST_STATUS = ["orchestrator.engine.steps", "orchestrator.engine.step_descriptions", "orchestrator.previews",
                          "orchestrator.hosts.inventory", "rich.console", "orchestrator.analysis.window", "getpass"]


@pytest.mark.parametrize("argv", [["plan", "gpu02", "--tag", "v0.0.300"], ["plan", "gpu02", "--tag", "v0.0.300", "--format", "json"],
                                  ["plan", "gpu02", "--tag", "v0.0.300", "--rollback", "r1"]],
                         ids=["plan", "plan-json", "plan-rollback"])
def test_a_first_plan_loads_no_step_handlers_fleet_or_journal(argv, tmp_path):
    rc, loaded = _loaded(argv, tmp_path)  # a fresh state dir: nothing cached, the plan is computed
    assert rc == 0
    assert "orchestrator.language.runbook" in loaded and "orchestrator.previews.plan" in loaded  # it was computed
    assert _heavy(loaded, HEAVY_FOR_FIRST_PLAN) == []


def test_a_first_status_loads_no_step_handlers_or_plan(tmp_path):
    _journal_with_runs(tmp_path)
    rc, loaded = _loaded(["status"], tmp_path)
    assert rc == 0
    assert "orchestrator.language.runbook" in loaded  # the step list was computed (not cached)
    assert _heavy(loaded, HEAVY_FOR_FIRST_STATUS) == []


def test_every_step_handler_has_the_description_plan_prints():
    """`plan` reads orchestrator/engine/step_descriptions.py, the executor the handlers: the same
    step kinds in both, and each handler's `describe` is that table's entry."""
    from orchestrator.engine.step_descriptions import DESCRIPTIONS
    from orchestrator.engine.steps import HANDLERS

    assert sorted(DESCRIPTIONS) == sorted(HANDLERS)
    assert all(type(h).describe.__qualname__ == "Described.describe" for h in HANDLERS.values())


def test_the_schema_models_default_to_empty_collections_without_builtin_factories():
    """`Field(default_factory=list)` costs a tokenizer pass over `list`'s text signature when pydantic
    builds the runbook or inventory schema (part of every first `plan` and `status`): the models
    use `lambda: []` / `lambda: {}` (orchestrator/language/step_specs.py says why)."""
    import re

    pkg = ROOT / "orchestrator"
    offenders = [f"{p.relative_to(ROOT)}:{i}" for p in sorted(pkg.rglob("*.py"))
                 for i, line in enumerate(p.read_text().splitlines(), 1)
                 if re.search(r"\bField\([^)]*default_factory=(list|dict)\b", line)]
    assert offenders == []


def test_only_short_read_only_commands_skip_the_interpreter_teardown():
    """The `orchestrate` process (orchestrator.cli.main) ends `plan` (offline), `status`, `runs`,
    `--help` and `--version` without freeing every object one by one; anything else takes
    Python's own exit."""
    from orchestrator.cli import _quick

    for args in (["plan", "gpu02", "--tag", "v1"], ["status"], ["status", "--json"], ["runs"], ["--help"], ["--version"],
                 ["plan", "--help"]):
        assert _quick(args, 0) and _quick(args, 2), args
    for args in (["plan", "gpu02", "--tag", "v1", "--live"], ["rollout", "gpu02"], ["serve"], ["demo"], ["approve", "x"], []):
        assert not _quick(args, 0), args
    assert not _quick(["status"], "a message")  # Python prints it: its own exit


def test_the_quick_exit_flushes_the_output_and_runs_the_atexit_handlers(tmp_path):
    """Run as the `orchestrate` script itself (a file of that name), `runs` prints its lines, runs
    the atexit handlers and exits with its code; `main` called in a process of another name (the
    probe above, tests, the explorer) still ends in SystemExit (the probe's `finally` runs)."""
    _journal_with_runs(tmp_path)
    script = tmp_path / "orchestrate"
    script.write_text("import atexit, sys\n"
                      "atexit.register(lambda: print('atexit ran'))\n"
                      "class Teardown:\n"
                      "    def __del__(self):\n"
                      "        print('teardown')\n"
                      "kept = Teardown()  # freed by the interpreter's teardown only\n"
                      "from orchestrator.cli import main\n"
                      "main()\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    env.update(ORCHESTRATOR_STATE_DIR=str(tmp_path / "state"), ORCHESTRATOR_INVENTORY=str(ROOT / "config" / "hosts.yaml"))
    r = subprocess.run([sys.executable, str(script), "runs"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "v0.0.301" in r.stdout and r.stdout.rstrip().endswith("atexit ran") and "teardown" not in r.stdout
    bad = subprocess.run([sys.executable, str(script), "status", "no-such-run"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "no-such-run" in bad.stderr and bad.stdout.strip() == "atexit ran"
    other = subprocess.run([sys.executable, str(script), "approve"], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=120)  # not a quick command: Python's own exit, teardown included
    assert other.returncode == 2 and other.stdout.splitlines() == ["atexit ran", "teardown"]
