"""Ctrl-C stops a run even when a cancellation is lost on its way (service.runner.execute_stoppable).

Mutation: `cancel_until_done` reduced to one `task.cancel()` -> only the bound's second signal
stops the run and the test fails (the run swallowed the only cancellation and went on)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from types import SimpleNamespace

import orchestrator.service.runner as runner


def test_a_run_that_swallows_the_first_cancellation_is_cancelled_again(monkeypatch):
    cancelled = []

    async def swallowing_execute(*args, **kwargs):
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(1)  # lost, as a library may lose it; the run goes on
        await asyncio.sleep(3600)

    monkeypatch.setattr(runner, "execute", swallowing_execute)
    run = SimpleNamespace(run_id="r1")
    session = SimpleNamespace(journal=SimpleNamespace(get_run=lambda _id: SimpleNamespace(terminal=False)))
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    bound = threading.Timer(10, os.kill, (os.getpid(), signal.SIGTERM))  # a second signal, if the first did not stop it
    bound.start()
    hard: list[str] = []
    try:
        _, stopped_by = runner.execute_stoppable(session, run, SimpleNamespace(replicas={}), None,
                                                 hard_stop=lambda run, sig: hard.append(sig))
    finally:
        timer.cancel()
        bound.cancel()
    assert hard == [], "the first Ctrl-C did not stop the run"
    assert stopped_by == "Ctrl-C" and len(cancelled) == 1
