"""P3 log-tail cost: what `LogFollower` fetches per new log line, and whether it loses any.

compose-manager's logs route only offers `--tail N`, so the follower re-fetches a window each poll
and finds the new lines by overlap (orchestrator/hosts/logfollow.py). Driven here without sockets or real
time, one poll per 10 s (the poll interval) of virtual time:

- synthetic engine logs at 1, 10 and 100 lines/s for 10 minutes (the first poll sees the empty log
  of a container that just started, as the executor's cold-start gate does), plus a bursty log (10 lines/s with
  a 1500-line dump in one interval). Lines look like SGLang's steady state: decode-batch lines with
  counters, prefill lines, and identical `GET /health` lines repeating within a second (the case
  the follower must not mis-align on). The fetch returns `docker compose logs --tail N` text
  (`name | line`), metered (`Meter`) for the bytes and lines fetched;
- the simulator's own engine (no servers: the simulated host's `compose_logs` on a manual clock):
  a new r2's whole cold start and ten minutes of steady state after its ready line;
- the same synthetic cases with a proposed window policy (`LastPollWindowFollower`: the next window
  from the last poll's new lines instead of the most of the last three polls), to measure it.

Reported per case: new lines, bytes fetched / bytes of the new lines (as fetched: prefix and newline
included; goal <= 3), lines fetched per new line, fetches per poll, lines missed (goal 0) and
duplicated (both against the true stream, poll by poll), gaps and resets the follower reported,
and the follower's CPU per poll.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from orchestrator.hosts.logfollow import FollowBatch, LogFollower
from orchestrator.hosts.parsers.compose_logs import last_redraw, parse_compose_logs

CONTAINER = "model-sg-glm53-w4afp8-tp4-r2"
POLL_S = 10.0


class SyntheticEngineLog:
    """An engine log growing at `rate` lines/s (plus optional bursts), rendered as compose logs."""

    def __init__(self, rate: float, seed: int = 3, bursts: dict[int, int] | None = None) -> None:
        self.rate = rate
        self.rng = random.Random(seed)
        self.lines: list[str] = []
        self.t0 = datetime(2026, 9, 23, 8, 0, 0, tzinfo=UTC)
        self.bursts = bursts or {}
        self._carry = 0.0
        self._interval = 0

    def _line(self, ts: datetime) -> str:
        stamp = ts.strftime("%Y-%m-%d %H:%M:%S")
        x = self.rng.random()
        if x < 0.25:
            return f'[{stamp}] INFO:     127.0.0.1:53826 - "GET /health HTTP/1.1" 200 OK'
        if x < 0.40:
            new = self.rng.randint(16, 9000)
            return (f"[{stamp} TP0] Prefill batch, #new-seq: 1, #new-token: {new}, #cached-token: "
                    f"{self.rng.randint(0, 60000)}, token usage: 0.{self.rng.randint(1, 40):02d}, #running-req: "
                    f"{self.rng.randint(0, 8)}, #queue-req: 0, ")
        running = self.rng.randint(1, 12)
        return (f"[{stamp} TP0] Decode batch, #running-req: {running}, #token: {running * self.rng.randint(900, 40000)}, "
                f"token usage: 0.{self.rng.randint(1, 60):02d}, cuda graph: True, gen throughput (token/s): "
                f"{running * 41.7 * self.rng.uniform(0.8, 1.2):.2f}, #queue-req: 0, ")

    def advance(self, seconds: float) -> int:
        """Let `seconds` of engine time pass; returns how many lines were written."""
        start = self._interval * seconds
        exact = self.rate * seconds + self._carry
        n = int(exact)
        self._carry = exact - n
        n += self.bursts.get(self._interval, 0)
        for k in range(n):
            self.lines.append(self._line(self.t0 + timedelta(seconds=start + seconds * k / max(1, n))))
        self._interval += 1
        return n

    def tail(self, n: int) -> str:
        width = len(CONTAINER) + 1
        chosen = self.lines[-n:] if n > 0 else []
        return "".join(f"{CONTAINER:<{width}} | {ln}\n" for ln in chosen)


def _formatted_bytes(lines: list[str]) -> int:
    width = len(CONTAINER) + 1
    return sum(len(f"{CONTAINER:<{width}} | {ln}\n".encode()) for ln in lines)


class Meter:
    """A follower's fetch, metered: calls, bytes and lines fetched (probes included)."""

    def __init__(self, fetch: Any) -> None:
        self._fetch = fetch
        self.calls = self.bytes = self.lines = 0

    async def __call__(self, tail: int) -> str:
        text = await self._fetch(tail)
        self.calls += 1
        self.bytes += len(text.encode("utf-8", "replace"))
        self.lines += len(parse_compose_logs(text))
        return text


class _Tally:
    def __init__(self) -> None:
        self.missed = self.duplicated = self.polls = self.exact_polls = 0
        self.all_polls = self.new_lines = self.gaps = self.resets = 0  # the first poll's too
        self.cpu = 0.0

    def note(self, batch: FollowBatch) -> list[str]:
        """Count one poll's new lines, gap and resets; its new lines."""
        self.all_polls += 1
        self.new_lines += len(batch.new)
        self.gaps += batch.gap
        self.resets += len(batch.reset_containers)
        return [ln.text for ln in batch.new]

    def check(self, expected: list[str], batch: FollowBatch) -> None:
        got = self.note(batch)
        self.polls += 1
        if expected == got:
            self.exact_polls += 1
            return
        want, have = Counter(expected), Counter(got)
        self.missed += sum((want - have).values())
        self.duplicated += sum((have - want).values())


class LastPollWindowFollower(LogFollower):
    """The proposed window policy (docs/performance.md): size the next window from the last poll's
    new lines (and the tail that last resolved a grow), not from the most of the last three polls."""

    def _next_tail(self) -> int:
        new, grown = self._history[-1]
        wanted = max(2 * new + self.min_overlap, grown)
        return max(self.min_tail, min(self.max_tail, wanted))


async def _follow_synthetic(rate: float, minutes: float, bursts: dict[int, int] | None = None,
                            follower_class: type[LogFollower] = LogFollower) -> dict[str, Any]:
    log = SyntheticEngineLog(rate, bursts=bursts)

    async def fetch(tail: int) -> str:
        return log.tail(tail)

    meter = Meter(fetch)
    follower = follower_class(meter)
    tally = _Tally()
    tally.note(await follower.poll())  # the gate's first poll comes right after the up: the log is still empty
    for _ in range(int(minutes * 60 / POLL_S)):
        before = len(log.lines)
        log.advance(POLL_S)
        expected = log.lines[before:]
        c0 = time.process_time()
        batch = await follower.poll()
        tally.cpu += time.process_time() - c0
        tally.check(expected, batch)
    return _result(meter, tally, log.lines)


def _result(meter: Meter, tally: _Tally, truth: list[str]) -> dict[str, Any]:
    new_bytes = _formatted_bytes(truth)
    return {
        "new_lines": len(truth),
        "polls": tally.polls,
        "bytes_fetched": meter.bytes,
        "bytes_new": new_bytes,
        "bytes_ratio": meter.bytes / new_bytes if new_bytes else None,
        "lines_fetched_per_new_line": meter.lines / len(truth) if truth else None,
        "bytes_fetched_per_new_line": meter.bytes / tally.new_lines if tally.new_lines else None,
        "fetches_per_poll": meter.calls / max(1, tally.all_polls),
        "missed": tally.missed,
        "duplicated": tally.duplicated,
        "exact_polls": tally.exact_polls,
        "gaps": tally.gaps,
        "resets": tally.resets,
        "cpu_ms_per_poll": tally.cpu / max(1, tally.polls) * 1000,
    }


class ManualClock:
    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:  # pragma: no cover - the host never sleeps
        self.t += seconds


async def _follow_simulated(steady_minutes: float = 10.0, cold_start_s: float = 2400.0) -> dict[str, Any]:
    from orchestrator_sim import SimConfig, SimFleet
    from orchestrator_sim.compose_manager.repo import TARGET_FILE, TARGET_TAG

    fleet = SimFleet(SimConfig(speed=1, cold_start_s=cold_start_s, seed=5))  # never started: no servers
    try:
        clock = ManualClock()
        host = fleet.host
        host.clock = clock
        host.begin_up({"tag": TARGET_TAG, "file": TARGET_FILE, "services": [CONTAINER],
                       "env": fleet.dashboard_env}, None)
        while (c := host.container(CONTAINER)) is None or c.state != "running":
            clock.t += 1.0
            if clock.t > 600:
                raise RuntimeError("the simulated engine did not start")

        async def fetch(tail: int) -> str:
            return host.compose_logs([CONTAINER], tail)

        meter = Meter(fetch)
        follower = LogFollower(meter)
        tally = _Tally()
        seen = 0
        ready_at = None
        while True:
            clock.t += POLL_S
            c = host.container(CONTAINER)
            full = host.logs(CONTAINER)
            expected = full[seen:]
            seen = len(full)
            c0 = time.process_time()
            batch = await follower.poll()
            tally.cpu += time.process_time() - c0
            tally.check([last_redraw(x) for x in expected], batch)
            if ready_at is None and c is not None and c.ready:
                ready_at = clock.t
            if ready_at is not None and clock.t - ready_at >= steady_minutes * 60:
                break
        truth = host.logs(CONTAINER)
        # The simulator's engine prints progress bars as one line with \r redraws; the follower
        # yields the last redraw (what a terminal shows). Count those lines as delivered.
        res = _result(meter, tally, truth)
        res["note"] = "cold start (~2400 s) then 10 min of steady state; progress-bar lines compared by their last redraw"
        return res
    finally:
        fleet.stop()


def run(*, quick: bool = False, smoke: bool = False, progress: Any = None) -> dict[str, Any]:
    t0 = time.monotonic()
    minutes = 0.5 if smoke else 5.0 if quick else 10.0
    cases: dict[str, dict[str, Any]] = {}
    for rate in (1.0, 10.0, 100.0):
        cases[f"{rate:g} lines/s"] = asyncio.run(_follow_synthetic(rate, minutes))
        if progress is not None:
            progress(f"P3 {rate:g} lines/s: ratio {cases[f'{rate:g} lines/s']['bytes_ratio']:.2f}")
    cases["10 lines/s + 1500-line burst"] = asyncio.run(_follow_synthetic(10.0, minutes, bursts={10: 1500}))
    for rate in (1.0, 10.0, 100.0):
        cases[f"{rate:g} lines/s, proposed window policy"] = asyncio.run(
            _follow_synthetic(rate, minutes, follower_class=LastPollWindowFollower))
    cases["10 lines/s + 1500-line burst, proposed window policy"] = asyncio.run(
        _follow_synthetic(10.0, minutes, bursts={10: 1500}, follower_class=LastPollWindowFollower))
    cold = 240.0 if smoke else 2400.0
    cases["simulated engine (cold start + steady)"] = asyncio.run(
        _follow_simulated(steady_minutes=0.5 if smoke else 10.0, cold_start_s=cold))
    goal = {name: {"bytes_ratio_met": (c["bytes_ratio"] or 0) <= 3.0, "no_line_missed": c["missed"] == 0}
            for name, c in cases.items()}
    # the cold-start gate's reads (issue 25): before (poll only) and after (log probes), happy and OOM
    gate = {"happy": cold_start_cases(None, cold_start_s=cold), "oom:r2": cold_start_cases(["oom:r2"], cold_start_s=cold)}
    if progress is not None:
        for k, v in gate["happy"].items():
            progress(f"P3 cold-start gate, {k}: {v['log_bytes_per_min'] / 1000:.1f} KB of log per minute, "
                     f"line latency p95 {v['line_latency']['p95']:.1f} s")
    return {"poll_interval_s": POLL_S, "minutes": minutes, "cases": cases, "goal": goal, "cold_start_gate": gate,
            "real_s": time.monotonic() - t0}


async def _cold_start_gate(probe_s: float | None, *, cold_start_s: float = 2400.0, faults: list[str] | None = None,
                           tick_s: float = 0.1) -> dict[str, Any]:
    """The cold-start gate's reads of the simulated engine in virtual time (no sockets), as
    steps/gates.py ColdStart makes them: `docker ps` every POLL_S; without probes the log is read at
    each of those polls (before); with `probe_s`, a `--tail 1` probe every `probe_s` (the last one
    at the poll), a probe that shows an unread line has the log read at once, and while the probes
    say nothing is new the poll skips the log read but for one full read every FULL_READ_S
    (Runtime.wait_for_output). Measured over the cold start (engine start to ready line or exit):
    log bytes fetched per minute (probes included), `docker ps` calls and bytes per minute, and
    each line's read latency (from the tick it appeared in the log to the read that yielded it)."""
    from orchestrator.engine.executor.runtime import COLD_START_WINDOW
    from orchestrator.engine.steps.logs import FULL_READ_S
    from orchestrator_sim import SimConfig, SimFleet
    from orchestrator_sim.compose_manager.repo import TARGET_FILE, TARGET_TAG

    from bench.stats import summary

    fleet = SimFleet(SimConfig(speed=1, cold_start_s=cold_start_s, seed=5, faults=list(faults or [])))
    try:
        clock = ManualClock()
        host = fleet.host
        host.clock = clock
        host.begin_up({"tag": TARGET_TAG, "file": TARGET_FILE, "services": [CONTAINER], "env": fleet.dashboard_env}, None)
        while (c := host.container(CONTAINER)) is None or c.state != "running":
            clock.t += 1.0
            if clock.t > 600:
                raise RuntimeError("the simulated engine did not start")
        start = clock.t

        async def fetch(tail: int) -> str:
            return host.compose_logs([CONTAINER], tail)

        meter = Meter(fetch)
        follower = LogFollower(meter, initial_tail=COLD_START_WINDOW, max_tail=max(COLD_START_WINDOW, 5000))
        appeared: list[float] = []  # when each line of the log appeared (tick granularity)
        latencies: list[float] = []
        read = 0
        ps_calls = ps_bytes = reads = probes = probe_bytes = 0
        ps_due = read_due = clock.t
        waited = "unprobed"
        next_probe = float("inf")
        ended_at = None
        while ended_at is None:
            n = len(host.logs(CONTAINER))
            appeared += [clock.t] * (n - len(appeared))
            act = False
            if clock.t >= ps_due or clock.t >= next_probe:
                if probe_s:
                    probes, before = probes + 1, meter.bytes
                    news = await follower.probe()
                    probe_bytes += meter.bytes - before
                    if news:
                        waited, act = "news", True
                    elif clock.t >= ps_due:
                        waited, act = "quiet", True
                    next_probe = min(clock.t + probe_s, ps_due if clock.t < ps_due else clock.t + POLL_S)
                else:
                    act = clock.t >= ps_due
            if act:
                c = host.container(CONTAINER)
                if waited != "news" or ps_due <= clock.t:
                    ps_calls += 1
                    ps_bytes += len("\n".join(host.ps_lines()).encode())
                    ps_due = clock.t + POLL_S
                if not (waited == "quiet" and clock.t < read_due):
                    reads += 1
                    read_due = clock.t + FULL_READ_S
                    batch = await follower.poll()
                    for _ in batch.new:
                        if read < len(appeared):
                            latencies.append(clock.t - appeared[read])
                        read += 1
                if c is None or c.state != "running" or any(ln.endswith("ready to roll!") for ln in host.logs(CONTAINER)[-3:]) \
                        and read >= n:
                    ended_at = clock.t
                if probe_s:
                    next_probe = min(clock.t + probe_s, ps_due)
                waited = "unprobed" if not probe_s else waited
            clock.t += tick_s
        minutes = (ended_at - start) / 60
        return {
            "probe_s": probe_s, "minutes": minutes, "reads": reads, "probes": probes,
            "log_bytes_per_min": meter.bytes / minutes, "probe_bytes_per_min": probe_bytes / minutes,
            "ps_calls_per_min": ps_calls / minutes, "ps_bytes_per_min": ps_bytes / minutes,
            "all_bytes_per_min": (meter.bytes + ps_bytes) / minutes,
            "lines": len(latencies), "line_latency": summary(latencies),
        }
    finally:
        fleet.stop()


def cold_start_cases(faults: list[str] | None = None, cold_start_s: float = 2400.0,
                     probes: tuple[float, ...] | None = None) -> dict[str, Any]:
    """Before (the log read at every 10-second poll) and after (probes between polls), side by side."""
    from orchestrator.util.settings import Settings

    cases = {"poll 10 s (before)": asyncio.run(_cold_start_gate(None, cold_start_s=cold_start_s, faults=faults))}
    for p in probes or (Settings.model_fields["log_probe_interval"].default,):
        cases[f"poll 10 s + probe {p:g} s (after)"] = asyncio.run(_cold_start_gate(p, cold_start_s=cold_start_s, faults=faults))
    return cases
