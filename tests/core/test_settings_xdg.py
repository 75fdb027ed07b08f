"""Defaults from XDG, the inventory search order, one-line setting errors, the activity and target
tag `runs` shows, and connection errors that name the URL (issue 14)."""

from __future__ import annotations

import asyncio
import socket
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from orchestrator.util.settings import Settings, load_settings
from orchestrator.util.user_errors import UserError


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for var in ("ORCHESTRATOR_STATE_DIR", "ORCHESTRATOR_INVENTORY", "ORCHESTRATOR_DATABASE_URL", "ORCHESTRATOR_POLL_INTERVAL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_state_dir_follows_xdg_state_home_and_ignores_a_relative_one(clean_env, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(clean_env / "xdg-state"))
    assert Settings().state_dir == clean_env / "xdg-state" / "orchestrator"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/dir")  # the spec: ignore relative paths
    assert Settings().state_dir == clean_env / "home" / ".local" / "state" / "orchestrator"
    monkeypatch.setenv("ORCHESTRATOR_STATE_DIR", str(clean_env / "explicit"))
    assert Settings().state_dir == clean_env / "explicit"


def test_inventory_search_order(clean_env, monkeypatch):
    xdg = clean_env / "xdg-config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    with pytest.raises(UserError) as exc:
        Settings().inventory_path()
    assert "--inventory" in str(exc.value) and str(xdg / "orchestrator" / "hosts.yaml") in str(exc.value)

    (xdg / "orchestrator").mkdir(parents=True)
    (xdg / "orchestrator" / "hosts.yaml").write_text("x")
    assert Settings().inventory_choice().source == "$XDG_CONFIG_HOME/orchestrator/hosts.yaml"

    (clean_env / "config").mkdir()
    (clean_env / "config" / "hosts.yaml").write_text("x")
    assert Settings().inventory_choice().path == Path("config/hosts.yaml")  # the working directory's first

    monkeypatch.setenv("ORCHESTRATOR_INVENTORY", str(clean_env / "env.yaml"))
    choice = Settings().inventory_choice()
    assert (choice.path, choice.source) == (clean_env / "env.yaml", "ORCHESTRATOR_INVENTORY")  # even if missing

    choice = Settings().with_inventory(clean_env / "flag.yaml").inventory_choice()
    assert (choice.path, choice.source) == (clean_env / "flag.yaml", "--inventory")
    assert "from --inventory" in choice.describe()


def test_an_installed_wheel_falls_back_to_its_example_inventory_and_never_acts_on_it(clean_env, monkeypatch):
    """The wheel carries the checkout's placeholder inventory: the offline plan reads it when no
    other is found; a command that acts refuses its placeholder URLs (one line naming it)."""
    from orchestrator.service.oncall import refuse_placeholder_inventory
    from orchestrator.util import names

    monkeypatch.setenv("XDG_CONFIG_HOME", str(clean_env / "xdg-config"))
    example = Path(__file__).resolve().parents[2] / "config" / "hosts.yaml"
    monkeypatch.setattr(names, "example_inventory", lambda: example)
    settings = Settings()
    assert settings.inventory_path() == example
    assert "example shipped with orchestrate" in settings.inventory_choice().describe()
    with pytest.raises(UserError) as exc:
        refuse_placeholder_inventory(settings, "gpu02")
    assert "example shipped with orchestrate" in str(exc.value) and "placeholder for gpu02" in str(exc.value)

    (clean_env / "xdg-config" / "orchestrator").mkdir(parents=True)
    (clean_env / "xdg-config" / "orchestrator" / "hosts.yaml").write_text("x")
    assert Settings().inventory_choice().source == "$XDG_CONFIG_HOME/orchestrator/hosts.yaml"  # the user's wins


def test_a_checkout_has_no_packaged_example_inventory():
    from orchestrator.util.names import example_inventory

    assert example_inventory() is None  # the checkout's own config/hosts.yaml serves


@pytest.mark.parametrize("var,value", [
    ("ORCHESTRATOR_POLL_INTERVAL", "abc"),
    ("ORCHESTRATOR_POLL_INTERVAL", "0"),
    ("ORCHESTRATOR_DATABASE_URL", "mysql://root:s3cret-password@db/x"),
])
def test_a_bad_setting_is_one_line_naming_the_variable_never_the_value(clean_env, monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(UserError) as exc:
        load_settings()
    text = str(exc.value)
    assert var in text and "\n" not in text and "s3cret-password" not in text


def test_missing_host_tokens_are_named(clean_env, monkeypatch):
    for name in ("COMPOSE_MANAGER", "DASHBOARD", "MODEL_PROXY", "INFERENCE"):
        monkeypatch.setenv(f"ORCHESTRATOR_{name}_TOKEN", "t" * 20)
    monkeypatch.setenv("ORCHESTRATOR_DASHBOARD_TOKEN", "")
    with pytest.raises(UserError, match="rollout needs ORCHESTRATOR_DASHBOARD_TOKEN: set it"):
        Settings().require_host_tokens("rollout")


def _run(kind="rollout", tag="v0.0.300", context=None, terminal=False, outcome=None):
    from orchestrator.journal.base import RunRecord

    now = datetime.now(UTC)
    return RunRecord("gpu02-x", "gpu02", "rb", tag, kind, "r2.soak", terminal, outcome, None, context or {}, now, now, None)


def test_a_rollbacks_target_tag_is_the_tag_it_goes_back_to():
    from orchestrator.service.activity import target_tag

    assert target_tag(_run()) == "v0.0.300"
    back = _run(kind="rollback", context={"previous": {"r2": {"tag": "v0.0.290", "file": "f"}, "r1": {"tag": "v0.0.290", "file": "f"}}})
    assert target_tag(back) == "v0.0.290"
    assert target_tag(_run(kind="rollback", context={})) == "v0.0.300"  # nothing journaled: the run's tag


def test_activity_from_the_lease(tmp_path):
    from orchestrator.journal import SqliteJournal
    from orchestrator.journal.owner import owner_text
    from orchestrator.service.activity import run_activity

    j = SqliteJournal(tmp_path / "j.sqlite3")
    try:
        run = j.create_run(host="gpu02", runbook="rb", tag="v0.0.300", kind="rollout", state="r2.apply", context={})
        assert run_activity(run, j).label == "interrupted"  # never leased
        lease, _ = j.acquire_lease("gpu02", run.run_id, owner_text(), 60)
        assert run_activity(run, j).label == "running"  # held by this live process
        j.record_audit(run.run_id, "paused", "carol")
        act = run_activity(run, j)
        assert act.label == "paused" and "paused by carol" in act.detail
        assert f"orchestrate continue {run.run_id}" in act.detail
        j.record_audit(run.run_id, "continued", "carol")
        assert run_activity(run, j).label == "running"
        j.release(lease)
        assert run_activity(run, j).label == "interrupted"
        ended = j.get_run(run.run_id)
        assert run_activity(ended.__class__(**{**ended.__dict__, "terminal": True, "outcome": "DONE"}), j).label == "ended"
    finally:
        j.close()


def test_a_connection_error_names_the_url():
    from orchestrator.hosts.clients.errors import transport_error
    from orchestrator.hosts.redaction import Redactor

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there

    async def call() -> httpx.HTTPError:
        async with httpx.AsyncClient() as c:
            try:
                await c.get(f"http://127.0.0.1:{port}/api/v1/instances?token=abc")
            except httpx.HTTPError as exc:
                return exc
        raise AssertionError("connected to a closed port")

    err = transport_error("dashboard", asyncio.run(call()), Redactor())
    assert f"GET http://127.0.0.1:{port}/api/v1/instances" in str(err)
    assert "token=abc" not in str(err)  # no query string


@pytest.mark.parametrize("value", ["nan", "abc", "-3", "inf"])
def test_a_bad_time_scale_is_one_line_naming_the_switch(value, monkeypatch):
    """ORCHESTRATOR_TIME_SCALE is no setting (never read from .env): a test-only switch, checked
    where the clock is chosen."""
    from orchestrator.util.clock import clock_for

    monkeypatch.setenv("ORCHESTRATOR_TIME_SCALE", value)
    with pytest.raises(UserError) as exc:
        clock_for(["http://127.0.0.1:1"])
    assert "ORCHESTRATOR_TIME_SCALE" in str(exc.value) and "\n" not in str(exc.value)


def test_a_time_scale_against_a_real_host_is_refused(monkeypatch):
    from orchestrator.util.clock import RealClock, ScaledClock, clock_for

    monkeypatch.setenv("ORCHESTRATOR_TIME_SCALE", "6000")
    with pytest.raises(UserError, match="loopback"):
        clock_for(["http://127.0.0.1:1", "https://gpu02.example.invalid:8080"])
    assert isinstance(clock_for(["http://127.0.0.1:1", "http://[::1]:2"]), ScaledClock)
    monkeypatch.delenv("ORCHESTRATOR_TIME_SCALE")
    assert isinstance(clock_for(["https://gpu02.example.invalid"]), RealClock)


def test_names_are_case_insensitive_a_blank_inventory_is_none_and_the_database_url_is_stripped(clean_env, monkeypatch):
    monkeypatch.setenv("orchestrator_state_dir", str(clean_env / "lower"))
    monkeypatch.setenv("ORCHESTRATOR_INVENTORY", "  ")
    monkeypatch.setenv("ORCHESTRATOR_DATABASE_URL", " sqlite:///x.db ")
    monkeypatch.setenv("ORCHESTRATOR_NOTIFY_URL", "https://hooks.example/secret-path")
    s = load_settings()
    assert s.state_dir == clean_env / "lower" and s.inventory is None
    assert s.journal_location() == "sqlite:///x.db"
    assert "https://hooks.example/secret-path" in s.tokens()  # a webhook URL is redacted like a token


@pytest.mark.parametrize("argv", [["runs"], ["status"], ["approve", "gpu02-x"]])
def test_every_command_reads_settings_as_pydantic_settings_does_dotenv_and_errors(clean_env, argv):
    """The read-only commands read the one `Settings`: a `.env` file in the working directory
    places their journal, and an invalid variable in it is its one line (exit 2)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    (clean_env / ".env").write_text("ORCHESTRATOR_STATE_DIR=from-dotenv\n")
    r = subprocess.run([sys.executable, "-m", "orchestrator.cli", *argv], cwd=clean_env, env=env,
                       capture_output=True, text=True, timeout=120)
    assert str(Path("from-dotenv") / "journal.sqlite3") in r.stdout + r.stderr, r.stderr
    (clean_env / ".env").write_text("ORCHESTRATOR_STATE_DIR=from-dotenv\nORCHESTRATOR_LEASE_TTL=-1\n")
    r = subprocess.run([sys.executable, "-m", "orchestrator.cli", *argv], cwd=clean_env, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.startswith("orchestrate: ORCHESTRATOR_LEASE_TTL (environment or .env) is invalid")


def test_the_database_password_is_a_secret_and_never_in_the_journal_shown(clean_env, monkeypatch):
    monkeypatch.setenv("ORCHESTRATOR_DATABASE_URL", "postgresql://orch:s3cret-pw-0123@db.internal:5432/orch")
    s = Settings()
    assert s.journal_url() == "postgresql://orch:s3cret-pw-0123@db.internal:5432/orch"  # what the journal opens
    assert s.journal_location() == "postgresql://orch:***@db.internal:5432/orch"  # what every message shows
    assert "s3cret-pw-0123" in s.tokens()  # the redactor hides it wherever else it turns up
    monkeypatch.setenv("ORCHESTRATOR_DATABASE_URL", "postgresql://db.internal/orch")
    assert Settings().journal_location() == "postgresql://db.internal/orch" and Settings().database_password() is None
