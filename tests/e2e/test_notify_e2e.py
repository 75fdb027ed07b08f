"""Notifications of real runs against the simulator: what a team channel receives, and that a
receiver that is down costs the run nothing but a bounded flush at its end."""

from __future__ import annotations

import asyncio
import time

import pytest
from pydantic import SecretStr

from helpers_webhook import BlackHole, Receiver
from orchestrator.language.runbook import DEFAULT_RUNBOOK
from orchestrator.service.notify import ATTEMPTS, FLUSH_S, TIMEOUT_S

pytestmark = pytest.mark.e2e

PUBLIC = "https://orchestrate.internal:8443"


class Approver:
    """Approves each soak the moment it waits for an approval (as an operator would), and notes
    when the run finished (wall clock)."""

    def __init__(self, journal) -> None:
        self.journal = journal
        self.finished_at: float | None = None
        self.approved = 0
        self.state = None

    def event(self, kind: str, /, **fields) -> None:
        if kind == "step_started":
            self.state = fields["state"]
        elif kind == "waiting" and "orchestrate approve" in str(fields.get("gate")):
            run_id = str(fields["gate"]).rsplit("orchestrate approve ", 1)[1].strip("`")
            self.journal.approve(run_id, self.state, by="carol")
            self.approved += 1
        elif kind == "run_finished":
            self.finished_at = time.monotonic()


def notify_run(e, url: str, fmt: str, *, yes: bool):
    from orchestrator.service.admission import new_rollout
    from orchestrator.service.runner import execute

    e.session.settings = e.session.settings.model_copy(
        update={"notify_url": SecretStr(url), "notify_format": fmt, "public_url": PUBLIC})
    e.session.redactor.add(url)
    run, rb, table = new_rollout(e.session, "gpu02", "v0.0.300", DEFAULT_RUNBOOK)
    watcher = Approver(e.session.journal)
    final = asyncio.run(execute(e.session, run, rb, table, progress=watcher, yes=yes, soak=0))
    return run, final, watcher, time.monotonic()


def secrets_of(e) -> list[str]:
    return [v for v in e.session.settings.tokens() if "127.0.0.1" not in v]


def test_a_run_with_approvals_notifies_each_wait_and_the_end(e2e_factory):
    e = e2e_factory()
    with Receiver() as rx:
        run, final, watcher, _ = notify_run(e, rx.url, "json", yes=False)
    assert final.outcome == "DONE", final.message
    assert watcher.approved == 1  # the runbook's one approval gate: r2's soak
    events = [(b["event"], b["state"], b["outcome"]) for b in rx.bodies]
    assert events == [("waiting_for_approval", "r2.soak", None), ("run_finished", events[-1][1], "DONE")], events
    for b in rx.bodies:
        assert b["run_id"] == run.run_id and b["host"] == "gpu02" and b["tag"] == "v0.0.300"
        assert b["url"] == f"{PUBLIC}/ui/runs/{run.run_id}"
        assert not any(s in str(b) for s in secrets_of(e))
    assert f"orchestrate approve {run.run_id}" in rx.bodies[0]["text"]


def test_a_rolled_back_run_notifies_slack_style(e2e_factory):
    e = e2e_factory("oom")
    with Receiver() as rx:
        run, final, _, _ = notify_run(e, rx.url, "slack", yes=True)
    assert final.outcome == "ROLLED_BACK", final.message
    assert len(rx.bodies) == 1 and set(rx.bodies[0]) == {"text"}, rx.bodies
    text = rx.bodies[0]["text"]
    assert "rolled back" in text and run.run_id in text and f"<{PUBLIC}/ui/runs/{run.run_id}|open the run>" in text
    assert not any(s in text for s in secrets_of(e))


def test_a_receiver_that_never_answers_does_not_slow_the_run(e2e_factory):
    """The run ends as usual, and `execute` returns about FLUSH_S after the run's last transition
    (printed), not after the deliveries' ATTEMPTS x TIMEOUT_S (20 s) that a receiver which never
    answers would cost. The bound asserted is half of those 20 s: wide enough for a loaded machine."""
    e = e2e_factory()
    with BlackHole() as hole:
        t0 = time.monotonic()
        run, final, watcher, returned = notify_run(e, hole.url, "slack", yes=False)
    assert final.outcome == "DONE", final.message
    tail = returned - watcher.finished_at
    print(f"run {watcher.finished_at - t0:.2f} s; execute returned {tail:.2f} s after the run ended (bound {FLUSH_S} s)")
    assert tail < ATTEMPTS * TIMEOUT_S / 2, tail
