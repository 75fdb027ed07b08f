"""Issue 12, item 12: a halt message proposes only commands that can run from that state.

After r1 failed and was stopped, the new r2 serves alone: the whole-host rollback's first engine
step would stop r2, the only serving replica, and the stop guard refuses it. So the r1 phase's
halt message must not offer `rollback --replica all` as a way out (it used to)."""

from __future__ import annotations

from orchestrator.language.machine import Event, Machine, compile_rollout
from orchestrator.language.runbook import load_runbook


def _r1_halt_message() -> str:
    rb = load_runbook()
    msg = rb.phase("r1").rollback.message  # type: ignore[union-attr]
    return " ".join(msg.format(host="gpu02", run_id="RUN").split())


def test_r1_halt_offers_the_retry_and_says_the_rollback_cannot_run():
    msg = _r1_halt_message()
    assert "orchestrate resume RUN --retry" in msg
    assert "cannot run from here" in msg
    # every mention of the whole-host rollback is inside the sentence that says it cannot run now
    before, _, after = msg.partition("`orchestrate rollback gpu02 --replica all` cannot run from here")
    assert "rollback gpu02 --replica all" not in before + after


def test_the_r1_halt_is_where_the_table_leads_after_an_r1_failure():
    rb = load_runbook()
    t = compile_rollout(rb)
    m = Machine(t)
    while m.state != "r1.cold-start":
        m.send(Event.OK)
    m.send(Event.FAIL)
    while not m.terminal:
        m.send(Event.OK)
    assert m.state == "HALTED"
    assert t.nodes["r1.rollback.stop-new"].halt_message == rb.phase("r1").rollback.message  # type: ignore[union-attr]
