"""Running an admitted run to its end (its lease, clients, log file, heartbeat, notifications),
the lease released on every way out; stoppable by Ctrl-C. The CLI, the demo, the server and the
end-to-end tests all run runs here, against whatever transport and clock they are given."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import structlog

from orchestrator.engine.executor import Executor, RunnerFenced, run_with_heartbeat
from orchestrator.engine.progress import CompositeProgress, NullProgress, Progress
from orchestrator.engine.run_logs import ROUTER, open_run_log
from orchestrator.hosts.host_clients import build_host_clients
from orchestrator.journal import audit
from orchestrator.journal.base import LeaseLost, RunRecord
from orchestrator.journal.owner import describe_owner
from orchestrator.language.machine import Table
from orchestrator.language.runbook import Runbook
from orchestrator.service.notify import FLUSH_S, NotifyProgress
from orchestrator.service.session import Session, notifier_for
from orchestrator.util.exit_codes import INTERRUPTED_EXIT


async def execute(session: Session, run: RunRecord, rb: Runbook, table: Table, *, progress: Progress | None = None,
                  yes: bool = False, soak: float | None = None) -> RunRecord:
    """Run the executor to a terminal state under the host's lease (`admission.admit` took it with
    the run: every run is admitted there first).

    The lease is released on every way out but a fencing (then it is someone else's). Ctrl-C
    cancels the run (`execute_stoppable`): the journal's writes are synchronous, so a cancellation
    lands between two of them and `orchestrate resume` continues from where the journal says.
    """
    entry = session.inventory.host(run.host)
    admitted = session.admitted.pop(run.run_id)
    lease, taken = admitted.lease, admitted.took_over
    audit.record_start(session.journal, run, audit.cli_actor())  # who: the server journals its own first
    progress = progress or NullProgress()
    notifier, own_notifier = session.notifier, None
    if notifier is None and session.settings.notify_url.get_secret_value():
        notifier = own_notifier = notifier_for(session)
    if notifier is not None:
        progress = CompositeProgress(progress, NotifyProgress(notifier, run_id=run.run_id, host=run.host, kind=run.kind,
                                                              tag=run.tag, public_url=session.settings.public_url))
    ex: Executor | None = None
    clients = None
    fenced = False
    try:
        if taken is not None:
            expired = taken.expires_at <= datetime.now(UTC)
            what = "the expired lease" if expired else "the lease"
            why = "" if expired else ": its process is gone"
            progress.event("note", clock=session.clock.monotonic(),
                           text=f"took over {what} of run {taken.run_id} ({describe_owner(taken.owner)}){why}")
        log_path = open_run_log(session.settings.state_dir, run.run_id, session.redactor)
        progress.event("note", clock=session.clock.monotonic(), text=f"journal: {session.settings.journal_location()}  log: {log_path}")
        clients = build_host_clients(session.settings, session.inventory, entry, session.redactor,
                                     transport=session.transport, retry=session.retry, clock=session.clock)
        ex = Executor(
            run=run, runbook=rb, table=table, journal=session.journal, lease=lease, clients=clients, entry=entry,
            clock=session.clock, poll_interval=session.settings.poll_interval, redactor=session.redactor,
            progress=progress, yes=yes, soak_override=soak,
        )
        ex.rt.log_probe_interval = session.settings.log_probe_interval
        try:
            # every log event of this task (clients included) carries the run: routed to its file
            with structlog.contextvars.bound_contextvars(run_id=run.run_id, host=run.host):
                final = await run_with_heartbeat(ex, session.journal, session.settings.lease_ttl)
        except RunnerFenced as exc:
            progress.event("note", clock=session.clock.monotonic(), text=f"this runner lost the lease of {run.host}: {exc}")
            fenced = True  # the lease is someone else's now: nothing to release
            raise
    except BaseException:
        if not fenced:
            _release_quietly(session, ex.rt.lease if ex is not None else lease)
        raise
    finally:
        if clients is not None:
            await clients.aclose()
        if own_notifier is not None:
            await own_notifier.aclose(FLUSH_S)
        ROUTER.close(run.run_id)
    session.journal.release(ex.rt.lease)
    return final


def _release_quietly(session: Session, lease: Any) -> None:
    """Release on the way out of a run that stopped unfinished. A journal that fails now must not
    hide why the run stopped (the lease then lapses)."""
    try:
        session.journal.release(lease)
    except LeaseLost:
        pass
    except Exception:  # noqa: BLE001 - the exception on its way out is the one to report
        structlog.get_logger().warning("lease_release_failed", host=lease.host, run_id=lease.run_id)


def exit_at_once(run: RunRecord, signame: str, says: str = "") -> None:
    """The default second Ctrl-C: no more waiting for a safe point."""
    says = says or (f"exiting at once; run {run.run_id} may have stopped mid-step: `orchestrate resume {run.run_id}` "
                    f"continues it (on this machine its lease is taken over at once)")
    sys.stderr.write(f"orchestrate: second {signame}: {says}\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(INTERRUPTED_EXIT)


def execute_stoppable(session: Any, run: RunRecord, rb: Any, table: Any, *,
                      hard_stop: Callable[[RunRecord, str], None] | None = None,
                      **kwargs: Any) -> tuple[RunRecord, str | None]:
    """(the run as it ended or stopped, what stopped it: None, `Ctrl-C` or a signal's name). The
    first Ctrl-C (or SIGTERM) cancels the run at its next await; a second calls `hard_stop`, which
    must not return."""
    progress = kwargs.get("progress")
    attach = getattr(progress, "attach_run", None)
    if attach is not None:  # a human progress prints the run's own last lines at its end
        attach(run, list(rb.replicas))
    stopped_by: list[str] = []
    on_hard_stop = hard_stop or exit_at_once

    async def main() -> RunRecord | None:
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(execute(session, run, rb, table, **kwargs))

        def cancel_until_done() -> None:
            # a cancellation can be lost on its way (a library that catches it while an inner
            # timeout fires at the same moment): asked again each second until the run has stopped
            if not task.done():
                task.cancel()
                loop.call_later(1.0, cancel_until_done)

        def on_signal(signame: str) -> None:
            if stopped_by:
                on_hard_stop(run, signame)
            stopped_by.append(signame)
            cancel_until_done()

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
    return now, (None if now.terminal else stopped_by[0])
