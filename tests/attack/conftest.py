"""Adversarial reproductions (branch `attack`): reuse the gatekeeper e2e harness (Team: the
simulated fleet, the CLI in its own process with the Ctrl-C/crash/stall hooks, `serve`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from test_gatekeeper_admission import Team  # noqa: E402


@pytest.fixture
def team(tmp_path):
    made: list[Team] = []

    def make(hosts: tuple[str, ...] = ("gpu02",)) -> Team:
        t = Team(tmp_path / f"t{len(made)}", hosts)
        made.append(t)
        return t

    yield make
    for t in made:
        t.close()


_spec = importlib.util.spec_from_file_location("e2e_conftest", Path(__file__).resolve().parents[1] / "e2e" / "conftest.py")
_e2e = importlib.util.module_from_spec(_spec)
sys.modules["e2e_conftest"] = _e2e
_spec.loader.exec_module(_e2e)
e2e_factory = _e2e.e2e_factory
