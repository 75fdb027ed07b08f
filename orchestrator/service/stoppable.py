"""Execution that a person can stop: `runner.execute` under signal handlers.

The first Ctrl-C (or SIGTERM) cancels the run at its next await, where the journal is consistent
(its writes are synchronous); `execute` releases the lease; the caller is told where the run
stopped (exit 130, `orchestrate resume RUN` continues it). A second Ctrl-C calls `hard_stop`,
which must not return (the CLI says so and exits at once)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any, Callable

from orchestrator.journal.base import RunRecord
from orchestrator.service.requests import INTERRUPTED_EXIT
from orchestrator.service.runner import execute


def exit_at_once(run: RunRecord, signame: str) -> None:
    """The default second Ctrl-C: no more waiting for a safe point."""
    sys.stderr.write(f"orchestrate: second {signame}: exiting at once; run {run.run_id} may have stopped mid-step: "
                     f"`orchestrate resume {run.run_id}` continues it (on this machine its lease is taken over at once)\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(INTERRUPTED_EXIT)


def execute_stoppable(session: Any, run: RunRecord, rb: Any, table: Any, *,
                      hard_stop: Callable[[RunRecord, str], None] | None = None,
                      **kwargs: Any) -> tuple[RunRecord, str | None]:
    """(the run as it ended or stopped, what stopped it: None, `Ctrl-C` or a signal's name)."""
    progress = kwargs.get("progress")
    attach = getattr(progress, "attach_run", None)
    if attach is not None:  # a human progress prints the run's own last lines at its end
        attach(run, list(rb.replicas))
    stopped_by: list[str] = []
    on_hard_stop = hard_stop or exit_at_once

    async def main() -> RunRecord | None:
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(execute(session, run, rb, table, **kwargs))

        def on_signal(signame: str) -> None:
            if stopped_by:
                on_hard_stop(run, signame)
            stopped_by.append(signame)
            task.cancel()

        installed = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, on_signal, "Ctrl-C" if sig == signal.SIGINT else sig.name)
                installed.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread / no signals
                pass
        try:
            return await task
        except asyncio.CancelledError:
            if not stopped_by:
                raise
            return None
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)

    final = asyncio.run(main())
    if final is not None:
        return final, None
    now = session.journal.get_run(run.run_id)
    if now.terminal:
        return now, None
    return now, stopped_by[0]


__all__ = ["execute_stoppable", "exit_at_once"]
