"""`orchestrate --help` lists every command with the first sentence of its own help (the table in
orchestrator/cli/__init__.py, read without importing the commands), and `plan` describes each step
kind from the same table the executor's handlers describe themselves with."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer
from typer.core import TyperCommand

from orchestrator.cli import COMMANDS, _command
from orchestrator.engine.step_descriptions import DESCRIPTIONS
from orchestrator.engine.steps import HANDLERS


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_summary_is_the_first_sentence_of_the_commands_help(name):
    cmd = _command().get_command(typer.Context(_command()), name)
    assert cmd is not None and cmd.name == name
    first_sentence = TyperCommand(name, help=cmd.help).get_short_help_str(10_000)
    assert COMMANDS[name] == first_sentence


def test_help_lists_every_command_in_order_with_its_summary_shortened_to_the_width():
    r = subprocess.run([sys.executable, "-m", "orchestrator.cli", "--help"], capture_output=True, text=True, timeout=120,
                       env={"PATH": ""})
    assert r.returncode == 0, r.stderr
    rows = [line.split(None, 1) for line in r.stdout.split("Commands:\n", 1)[1].splitlines() if line.strip()]
    assert [name for name, _ in rows] == list(COMMANDS)
    for name, shown in rows:
        summary = COMMANDS[name]
        assert shown == summary or (shown.endswith("...") and summary.startswith(shown[:-3])), name


def test_every_step_handler_has_the_description_plan_prints():
    """`plan` reads orchestrator/engine/step_descriptions.py, the executor the handlers: the same
    step kinds in both."""
    assert sorted(DESCRIPTIONS) == sorted(HANDLERS)
