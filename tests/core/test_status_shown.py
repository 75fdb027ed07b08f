"""`orchestrate status RUN` prints the journal's free text as text: a run's message, its notes and
who did what (a shared journal holds what any writer put there) reach the terminal with control
characters and bidi overrides made visible (util/text.py `shown`) and rich markup printed as
written; a database URL's password never.

Mutations (each seen failing, then restored):
- status.py, `shown(line)` -> `line` for the message lines -> the C1 byte and the override reach stdout;
- status.py, the header's host printed without `escape(shown(...))` -> the override reaches stdout;
- settings.py, `journal_location` returning the database URL as is -> the password is printed.
"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.journal import SqliteJournal

RUNBOOK = "gpu02-glm53-w4afp8-long-context"
INVENTORY = Path(__file__).resolve().parents[2] / "config" / "hosts.yaml"
#: a C1 control sequence introducer (clears a screen), a right-to-left override, markup rich
#: would read as a closing tag, an OSC 8 hyperlink
HOSTILE = "OOM \x9b2J [/INST] \u202etxt.exe [link=https://evil.example]x[/link] \x1b]8;;https://x\x07"
RAW = ("\x9b", "\u202e", "\x1b", "\x07")


def _env(state: Path, url: str = "") -> dict[str, str]:
    return {"ORCHESTRATOR_STATE_DIR": str(state), "ORCHESTRATOR_INVENTORY": str(INVENTORY), "ORCHESTRATOR_DATABASE_URL": url}


def test_journaled_free_text_is_shown_escaped(tmp_path: Path):
    state = tmp_path / "state"
    state.mkdir()
    j = SqliteJournal(state / "journal.sqlite3")
    try:
        run = j.create_run(host="gpu02\u202e", runbook=RUNBOOK, tag="v0.0.300", kind="rollout", state="r2.soak", context={})
        j.record_audit(run.run_id, "submitted", "mallory\u202e", HOSTILE)
        lease, _ = j.acquire_lease("gpu02\u202e", run.run_id, "x:1", 60)
        j.record_transition(lease, run.run_id, "r2.soak", "halt", "HALTED", terminal=True, outcome="HALTED",
                            message=HOSTILE, note=HOSTILE)
    finally:
        j.close()
    r = CliRunner().invoke(app, ["status", run.run_id], env=_env(state))
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "OOM \\x9b2J [/INST] \\u202etxt.exe [link=https://evil.example]x[/link] \\x1b]8;;https://x\\x07" in out, out
    assert "gpu02\\u202e" in out and "mallory\\u202e" in out, out
    assert not [c for c in RAW if c in out], out


def test_the_journal_location_never_shows_a_database_password(tmp_path: Path):
    from orchestrator.util.settings import Settings

    url = "postgresql://orch:hunter2-s3cret@db.internal:5432/orchestrator"
    s = Settings(inventory=INVENTORY, state_dir=tmp_path, database_url=url)
    assert s.journal_location() == "postgresql://orch:***@db.internal:5432/orchestrator"
    assert Settings(inventory=INVENTORY, state_dir=tmp_path, database_url="").journal_location() == str(tmp_path / "journal.sqlite3")
