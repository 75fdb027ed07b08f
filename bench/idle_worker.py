"""`python -m bench.idle_worker --state-dir DIR --window S`: the orchestrator alone in a process,
waiting on a cold start that will not finish, with the real clock (P4).

It reads DIR/sim.env (written by `bench.sim_server`), opens a `Session` like the CLI does (SQLite
journal in DIR/orchestrator), creates a run positioned at the r2 cold-start gate and runs it with
`runner.execute` (lease heartbeat included) for `--window` seconds, then cancels it. Measured from
the executor's `waiting` event (the gate's loop has started) to the end of the window: process CPU
time (user+system), wall time, RSS; peak RSS (ru_maxrss) at the end. Prints one JSON object.
Imports nothing of the simulator.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _rss_kib() -> int:
    return _status_kib("VmRSS")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def _wait(state: Path, window: float, poll: float) -> dict[str, Any]:
    from orchestrator.language.machine import DONE, HALTED, Event, compile_rollout
    from orchestrator.language.runbook import DEFAULT_RUNBOOK, load_runbook
    from orchestrator.service.admission import admit
    from orchestrator.service.runner import execute
    from orchestrator.service.session import Session
    from orchestrator.util.clock import RealClock
    from orchestrator.util.settings import Settings

    rss_imported = _rss_kib()
    for line in (state / "sim.env").read_text().splitlines():
        key, _, value = line.partition("=")
        os.environ[key] = value
    settings = Settings(state_dir=state / "orchestrator", poll_interval=poll, database_url="")
    session = Session.open(settings, clock=RealClock())
    rb = load_runbook(DEFAULT_RUNBOOK)
    table = compile_rollout(rb)
    edges = dict(table.edges)
    edges[("r2.cold-start", Event.OK)] = DONE
    edges[("r2.cold-start", Event.FAIL)] = HALTED
    table = dataclasses.replace(table, edges=edges)
    run = admit(session, host="gpu02", rb=rb, table=table,
                create=dict(host="gpu02", runbook=rb.name, tag="v0.0.300", kind="rollout", state="r2.cold-start",
                            context={"previous": {}, "plans": {}, "retries": {}})).run
    marks: dict[str, Any] = {}
    started = asyncio.Event()

    class Progress:
        def event(self, kind: str, **fields: Any) -> None:
            if kind == "waiting" and not started.is_set():
                marks.update(cpu0=_cpu(), wall0=time.monotonic(), unix0=time.time(), rss0=_rss_kib())
                started.set()
            if kind == "transition":
                marks.setdefault("transitions", []).append(fields.get("to"))

    task = asyncio.ensure_future(execute(session, run, rb, table, progress=Progress(), yes=True))
    await asyncio.wait_for(started.wait(), 60)
    await asyncio.sleep(window)
    cpu1, wall1, unix1, rss1 = _cpu(), time.monotonic(), time.time(), _rss_kib()
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, Exception):  # noqa: BLE001 - the run is cut on purpose
        pass
    session.close()
    wall = wall1 - marks["wall0"]
    cpu = cpu1 - marks["cpu0"]
    return {
        "window_s": wall,
        "cpu_s": cpu,
        "cpu_s_per_min": cpu / wall * 60,
        "unix_window": [marks["unix0"], unix1],
        "rss_after_imports_mib": rss_imported / 1024,
        "rss_window_start_mib": marks["rss0"] / 1024,
        "rss_window_end_mib": rss1 / 1024,
        # VmHWM: the peak RSS of this process image. ru_maxrss is not used: after a vfork+exec
        # (how subprocess starts this worker) Linux carries the parent's peak into it.
        "peak_rss_mib": _status_kib("VmHWM") / 1024,
        "cpu_total_process_s": _cpu(),
        "transitions": marks.get("transitions", []),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.idle_worker")
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--window", type=float, default=60.0)
    ap.add_argument("--poll", type=float, default=10.0)
    args = ap.parse_args(argv)
    out = asyncio.run(_wait(Path(args.state_dir), args.window, args.poll))
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
