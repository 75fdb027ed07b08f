"""Gates judge raw text; what leaves is scrubbed at the edge.

A credential the inventory declares secret (`secret_keys`) whose value is exactly what the
perception check's verdict line holds (`qualification_finished`): the one-shot gate reads the
check's output raw and sees its `{"event": "qualification_finished", "ok": true}`, so a healthy
rollout ends DONE (judged on scrubbed text it read `{"event": "***", "ok": true}`, found no
verdict and rolled back); and the value reaches neither the console, the run log, the captured
files, the journal nor the final message.

Mutation: `Runtime.raw_log` / `HostReads.log_through` reading scrubbed text (the redactor applied
to `compose.logs`' answer) -> the rollout is ROLLED_BACK on "no 'qualification_finished' event".
"""

from __future__ import annotations

import asyncio
import io
import json
import sqlite3

import pytest
from recording import RecordingProgress
from rich.console import Console

from orchestrator.cli.render import LiveProgress
from orchestrator.engine.progress import CompositeProgress
from orchestrator.language.runbook import DEFAULT_RUNBOOK

pytestmark = pytest.mark.e2e

#: a credential named by no rule, declared secret in the inventory
KEY = "QUALIFICATION_SIGNER"
#: its value: the event the perception check's verdict line carries (the runbook's `ok_event`)
VALUE = "qualification_finished"
#: what a run's context keeps of the runbook it follows (its own words: data, journaled exact)
RUNBOOK = ("runbook_identity", "runbook_text")


def test_a_declared_secret_equal_to_the_perception_verdict_does_not_fail_a_healthy_rollout(e2e_factory):
    from orchestrator.service.admission import new_rollout
    from orchestrator.service.runner import execute

    e = e2e_factory()
    hosts = e.session.inventory.hosts
    hosts["gpu02"] = hosts["gpu02"].model_copy(update={"secret_keys": (KEY,)})
    e.fleet.set_env_var(KEY, VALUE)
    screen = io.StringIO()
    console = Console(file=screen, width=200, color_system=None)
    progress = CompositeProgress(RecordingProgress(), LiveProgress(console))
    run, rb, table = new_rollout(e.session, "gpu02", "v0.0.300", DEFAULT_RUNBOOK)
    assert any(st.oneshot is not None and st.oneshot.ok_event == VALUE for steps in rb.step_lists() for st in steps), "the gate matches on it"

    final = asyncio.run(execute(e.session, run, rb, table, progress=progress, yes=True))

    assert final.outcome == "DONE", final.message
    assert e.session.redactor.scrub(VALUE) == "***"  # a secret: hidden wherever text leaves
    blobs = {"console": screen.getvalue(), "final message": str(final.message), "journal": _journal_text(e)}
    blobs |= {str(p): p.read_text() for p in (e.state_dir / "logs").rglob("*") if p.is_file()}
    assert any("oneshot_output" in b for b in blobs.values()), "the perception output reached the run log"
    assert "DONE" in blobs["console"] and "transition" in blobs["journal"]
    leaked = [where for where, blob in blobs.items() if VALUE in blob]
    assert leaked == [], leaked


def _journal_text(e) -> str:
    """Every row of every table of the run's journal, as text; of a run's context, all but the
    runbook it follows (`runbook_identity`, `runbook_text`: the runbook's own words, the run's data,
    kept exact)."""
    db = sqlite3.connect(e.state_dir / "journal.sqlite3")
    out = []
    try:
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            cur = db.execute(f"SELECT * FROM {table}")  # noqa: S608  # the journal's own table names
            names = [d[0] for d in cur.description]
            for row in cur:
                for name, value in zip(names, row, strict=True):
                    if table == "runs" and name == "context":
                        value = json.dumps({k: v for k, v in json.loads(value).items() if k not in RUNBOOK})
                    out.append(f"{table}.{name}: {value}")
    finally:
        db.close()
    return "\n".join(out)
