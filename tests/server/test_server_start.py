"""`orchestrate serve` refuses to start rather than serve badly."""

from __future__ import annotations

from orchestrator.teamserver.cli import run_serve


def test_no_token_no_server(settings, capsys):
    assert run_serve("127.0.0.1", 0, None, settings) == 2
    err = capsys.readouterr().err
    assert "refusing to serve without a token" in err and "--insecure-no-auth" in err


def test_an_unreachable_journal_fails_the_start_without_showing_its_password(settings, capsys):
    bad = settings.model_copy(update={"database_url": "postgresql://orchestrator:pw-9f8e7d6c5b@127.0.0.1:1/journal"})
    # an unreachable journal is the environment to fix (ORCHESTRATOR_DATABASE_URL), not a bug: exit 2
    assert run_serve("127.0.0.1", 0, "a-token-5e4d3c2b1a09f8e7d6c5b4a39281706f", bad) == 2
    err = capsys.readouterr().err
    assert "cannot open the journal" in err and "pw-9f8e7d6c5b" not in err
    assert len(err.strip().splitlines()) == 1 and "ORCHESTRATOR_DATABASE_URL" in err


def test_a_missing_inventory_fails_the_start(settings, tmp_path, capsys):
    bad = settings.model_copy(update={"inventory": tmp_path / "nope.yaml"})
    assert run_serve("127.0.0.1", 0, "a-token-5e4d3c2b1a09f8e7d6c5b4a39281706f", bad) == 2
    assert "nope.yaml" in capsys.readouterr().err
