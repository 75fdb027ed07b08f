"""The review's findings at the run level (runner.py), on a real SQLite journal:
- a host whose run stopped with a compose call of unknown outcome: no new run acts beside it;
- a run is not continued after a later run acted on its host;
- `--continue` at a phase needs the journal to show the phase before it passed its last gate.
Mutation: removing each refusal makes its test fail (no exception raised)."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from orchestrator.journal import SqliteJournal
from orchestrator.language.runbook import load_runbook
from orchestrator.service.refusals import _require_earlier_phases_passed, refuse_stale_resume, refuse_unsettled
from orchestrator.util.user_errors import Refused

#: The journal's clock stands still: which run is later is the journal's order, never a clock.
STILL = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


@pytest.fixture
def session(tmp_path):
    j = SqliteJournal(str(tmp_path / "journal.sqlite3"), now=lambda: STILL)
    yield SimpleNamespace(journal=j)
    j.close()


def _run(session, *, state="r2.apply", tag="v0.0.300", kind="rollout"):
    return session.journal.create_run(host="gpu02", runbook="gpu02-glm53-w4afp8-long-context", tag=tag, kind=kind,
                                      state=state, context={})


def test_a_call_of_unknown_outcome_blocks_new_runs_until_resumed(session):
    run = _run(session)
    lease, _ = session.journal.acquire_lease("gpu02", run.run_id, "test", 60)
    session.journal.record_intent(lease, run.run_id, "r2.apply@9", "compose_up", {"request": {}}, mutating=True)
    session.journal.release(lease)
    with pytest.raises(Refused, match=f"orchestrate resume {run.run_id}"):
        refuse_unsettled(session, "gpu02")
    refuse_unsettled(session, "gpu02", except_run=run.run_id)  # its own resume is what settles it


def test_a_run_is_not_continued_after_a_later_run_acted(session):
    old = _run(session, state="r2.soak")
    refuse_stale_resume(session, old)  # nothing newer: fine
    newer = _run(session, state="r1.stop-old")
    lease, _ = session.journal.acquire_lease("gpu02", newer.run_id, "test", 60)
    eff = session.journal.record_intent(lease, newer.run_id, "r1.stop-old@3", "compose_down", {"request": {}}, mutating=True)
    session.journal.record_outcome(lease, newer.run_id, eff.effect_id, {"status": "success"})
    with pytest.raises(Refused, match="no longer exists"):
        refuse_stale_resume(session, old)


def test_continue_at_r1_needs_r2s_last_gate_in_the_journal(session):
    rb = load_runbook()
    with pytest.raises(Refused, match="r2.soak"):
        _require_earlier_phases_passed(session, "gpu02", "v0.0.300", rb, "r1")
    run = _run(session, state="r2.soak")
    lease, _ = session.journal.acquire_lease("gpu02", run.run_id, "test", 60)
    session.journal.record_transition(lease, run.run_id, "r2.soak", "ok", "r1.stop-old", context={}, terminal=False,
                                      outcome=None, message=None, note="soaked and approved")
    _require_earlier_phases_passed(session, "gpu02", "v0.0.300", rb, "r1")
    with pytest.raises(Refused):  # another tag's run does not count
        _require_earlier_phases_passed(session, "gpu02", "v0.0.301", rb, "r1")


def test_a_rollback_of_the_run_blocks_its_resume_but_a_read_only_run_does_not(session):
    """The final review: a rollback whose parent is the run must block resuming it (it undid
    the run); a later run that only read the host (dry runs journaled as non-mutating effects,
    then ABORTED) must not. Mutations: restoring the blanket parent skip, or counting every effect."""
    old = _run(session, state="r1.cold-start")
    reader = _run(session, state="preflight.tag-age")
    lease, _ = session.journal.acquire_lease("gpu02", reader.run_id, "test", 60)
    eff = session.journal.record_intent(lease, reader.run_id, "preflight.host-state@2", "dry_run", {}, mutating=False)
    session.journal.record_outcome(lease, reader.run_id, eff.effect_id, {"status": "success"})
    session.journal.release(lease)
    refuse_stale_resume(session, old)  # a read-only later run: the resume goes on
    rollback = session.journal.create_run(host="gpu02", runbook="gpu02-glm53-w4afp8-long-context", tag="v0.0.300",
                                          kind="rollback", state="preflight.read-env", context={}, parent_run_id=old.run_id)
    assert rollback.parent_run_id == old.run_id
    with pytest.raises(Refused, match="no longer exists"):
        refuse_stale_resume(session, old)
