"""The read-only commands' settings without pydantic (orchestrator/service/startup.py `read_settings`):
for every environment they take the fast path on, they see what `Settings` sees (the journal,
the inventory chosen and why, the secrets to redact); anything `Settings` would convert or refuse
goes to `Settings` itself, so an invalid variable is still its one line (issue 25)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.util.settings import Settings, load_settings
from orchestrator.service.startup import ReadSettings, read_settings
from orchestrator.util.user_errors import UserError


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    import os

    for var in list(os.environ):
        if var.upper().startswith("ORCHESTRATOR_"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _same(inventory: Path | None = None) -> ReadSettings:
    fast = read_settings(inventory)
    full = load_settings().with_inventory(inventory)
    assert isinstance(fast, ReadSettings)
    assert fast.journal_location() == full.journal_location()
    assert fast.inventory_choice() == full.inventory_choice()
    assert fast.tokens() == full.tokens()
    assert fast.database_url == full.database_url and fast.state_dir == full.state_dir
    for name in ("compose_manager_token", "dashboard_token", "notify_url"):
        assert getattr(fast, name).get_secret_value() == getattr(full, name).get_secret_value()
    return fast


@pytest.mark.parametrize("env", [
    {},
    {"ORCHESTRATOR_STATE_DIR": "state", "ORCHESTRATOR_COMPOSE_MANAGER_TOKEN": "cm-secret", "ORCHESTRATOR_NOTIFY_URL": "https://h/x"},
    {"orchestrator_state_dir": "lower", "ORCHESTRATOR_INVENTORY": "inv.yaml"},  # names are case-insensitive
    {"ORCHESTRATOR_INVENTORY": "  ", "ORCHESTRATOR_DATABASE_URL": " sqlite:///x.db "},
    {"ORCHESTRATOR_POLL_INTERVAL": "2.5", "ORCHESTRATOR_LEASE_TTL": "1e2", "ORCHESTRATOR_LOG_PROBE_INTERVAL": "0",
     "ORCHESTRATOR_NOTIFY_FORMAT": "json", "ORCHESTRATOR_UNRELATED": "x"},
])
def test_the_fast_path_sees_what_settings_sees(clean_env, monkeypatch, env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    _same()
    _same(clean_env / "flag.yaml")


def test_the_inventory_search_is_the_same(clean_env, monkeypatch):
    (clean_env / "config").mkdir()
    (clean_env / "config" / "hosts.yaml").write_text("hosts: {gpu02: {url: 'http://a.invalid'}}\n")
    user = clean_env / "home" / ".config" / "orchestrator"
    user.mkdir(parents=True)
    (user / "hosts.yaml").write_text("hosts: {}\n")
    assert "placeholder" in _same().inventory_choice().source


@pytest.mark.parametrize("env", [
    {"ORCHESTRATOR_POLL_INTERVAL": "abc"}, {"ORCHESTRATOR_POLL_INTERVAL": "0"}, {"ORCHESTRATOR_LEASE_TTL": "inf"},
    {"ORCHESTRATOR_LOG_PROBE_INTERVAL": "-1"}, {"ORCHESTRATOR_DATABASE_URL": "mysql://u:p@h/db"},
    {"ORCHESTRATOR_NOTIFY_FORMAT": "xml"},
])
def test_an_invalid_variable_is_settings_own_one_line(clean_env, monkeypatch, env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(UserError) as fast:
        read_settings()
    with pytest.raises(UserError) as full:
        load_settings()
    assert str(fast.value) == str(full.value)


def test_a_dotenv_file_is_read_by_settings(clean_env):
    """.env follows pydantic-settings' rules: the fast path leaves it to them."""
    (clean_env / ".env").write_text("ORCHESTRATOR_STATE_DIR=from-dotenv\n")
    got = read_settings()
    assert isinstance(got, Settings) and got.state_dir == Path("from-dotenv")
