"""The run's time, as a step handler waits on it (a part of `Runtime`, runtime.py).

A poll (`wait`), a poll that probes an engine's log on the way (`wait_for_output`, issue 25), the
heartbeat lines of a long wait, and the abort check every abortable wait makes: an abort is
honoured between polls, never beside a call whose outcome is not known yet.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.hosts.clients.errors import ClientError
from orchestrator.hosts.logfollow import LogFollower

#: A heartbeat line during a long wait, on the run's clock.
HEARTBEAT_S = 300.0
#: Log probes closer than this in real time are not sent (see RuntimeClock.wait_for_output).
MIN_PROBE_REAL_S = 0.01


class AbortRequested(Exception):
    pass


class RuntimeClock:
    """Polls, log probes, heartbeats and abort checks; uses Runtime's clock, poll, journal, table, node."""

    def check_abort(self) -> None:
        node = self.node
        if node is not None and self.table.allows(node.id, _abort_event()) and self.journal.abort_requested(self.run.run_id):
            raise AbortRequested()

    async def wait(self, seconds: float | None = None, *, abortable: bool = True) -> None:
        """Sleep a poll. `abortable=False` while a sent call is being settled or waited out: an
        abort is honoured at the next step, never beside a call whose outcome is not known yet."""
        await self.clock.sleep(self.poll if seconds is None else seconds)
        if abortable:
            self.check_abort()

    #: Run-clock seconds between log probes in `wait_for_output` (runner.execute sets it from the
    #: settings); 0: none, `wait()` alone.
    log_probe_interval: float = 0.0

    async def wait_for_output(self, follower: LogFollower, until: float | None = None) -> str:
        """`wait()` until `until` (default: a poll from now), probing the log on the way (issue 25:
        a failure line seen within seconds, not within a poll interval): every
        `log_probe_interval` a `--tail 1` read (one line per container, where a poll reads at least
        16), the last one at `until`. Returns "news" as soon as a probe shows a line the follower
        has not read; "quiet" when the probes ran to the end and showed none (the caller may skip
        its own log read: a line logged since is seen by the next probe); "unprobed" when they did
        not run (none configured; a probe failed: the next poll judges; or probes would come less
        than MIN_PROBE_REAL_S of real time apart, a time-compressed simulation whose host could
        not serve that cadence)."""
        step = self.log_probe_interval
        end = until if until is not None else self.clock.monotonic() + self.poll
        real = getattr(self.clock, "real_seconds", None)
        outcome = "unprobed"
        failed = False
        while (left := end - self.clock.monotonic()) > 0:
            if step <= 0 or failed or (real is not None and real(step) < MIN_PROBE_REAL_S):
                outcome = "unprobed"
                await self.clock.sleep(left)
                break
            await self.clock.sleep(min(step, left))
            try:
                if await follower.probe():
                    outcome = "news"
                    break
                outcome = "quiet"
            except ClientError:
                failed = True
                outcome = "unprobed"
        self.check_abort()
        return outcome

    def start_heartbeat(self) -> float:
        """A long wait begins: its first heartbeat line comes HEARTBEAT_S from now. Returns now."""
        now = self.clock.monotonic()
        self._hb_next = now + HEARTBEAT_S
        return now

    def tick(self, what: str, started: float, timeout: float | None, extra: Callable[[], dict[str, Any]] | None = None) -> None:
        """A heartbeat line during a long wait: every HEARTBEAT_S on the run's clock. `extra` is
        called only when a line is due (what the wait has seen so far)."""
        now = self.clock.monotonic()
        if now < self._hb_next:
            return
        self._hb_next = now + HEARTBEAT_S
        self.emit("heartbeat", what=what, elapsed=now - started, timeout=timeout, **(extra() if extra else {}))


def _abort_event() -> Any:
    from orchestrator.language.machine import Event

    return Event.ABORT
