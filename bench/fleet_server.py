"""`python -m bench.fleet_server --state-dir DIR --hosts N`: N simulated gpu02s in one process of their
own, for the fleet benchmark (P5) run with the orchestrator alone in the benchmark's process.

Each host is a `SimFleet` (own servers, own thread) with `SimEvents` attached. DIR/hostNN/ gets
`inventory.yaml` and `sim.env` (the ORCHESTRATOR_* settings); DIR/ready gets JSON with, per host,
the directory and the clock origin: the simulator's time of a host is
`(time.monotonic() - origin) * speed`, and `time.monotonic()` is one system-wide clock on Linux,
so the orchestrator's process can stamp its own events on the same time axis. On SIGTERM every
host's record (calls, with env values fingerprinted, and simulator events) is written to
DIR/hostNN/record.json before exiting.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

from orchestrator_sim import SimConfig, SimFleet

from bench.http_timing import fleet_ports
from bench.sim_events import SimEvents
from bench.sim_fixes import simulator_fixes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fleet_server")
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--hosts", type=int, default=20)
    ap.add_argument("--speed", type=float, default=20.0)
    ap.add_argument("--cold-start", type=float, default=600.0)
    ap.add_argument("--faults", default="[]", help="JSON list, one list of fault specs per host")
    ap.add_argument("--as-shipped", action="store_true", help="do not apply the simulator fixes")
    args = ap.parse_args(argv)
    state = Path(args.state_dir)
    faults = json.loads(args.faults) or [[] for _ in range(args.hosts)]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    fixed = not args.as_shipped
    with simulator_fixes(nodelay=fixed, tick=fixed):
        fleets = [SimFleet(SimConfig(speed=args.speed, cold_start_s=args.cold_start, faults=faults[i], seed=100 + i))
                  for i in range(args.hosts)]
        recorders = [SimEvents.attach(f) for f in fleets]
        hosts = []
        try:
            for i, f in enumerate(fleets):
                f.start()
                d = state / f"host{i:02d}"
                d.mkdir(parents=True, exist_ok=True)
                f.write_inventory(d / "inventory.yaml")
                (d / "sim.env").write_text("".join(f"{k}={v}\n" for k, v in f.env_for_orchestrator().items()))
                hosts.append({"dir": str(d), "origin": time.monotonic() - f.clock.monotonic() / args.speed,
                              "faults": faults[i], "ports": sorted(fleet_ports(f.urls))})
            (state / "ready").write_text(json.dumps({"speed": args.speed, "hosts": hosts}))
            while not stop.wait(0.2):
                pass
            for i, (f, rec) in enumerate(zip(fleets, recorders)):
                record = {"calls": [c.to_json(redact_env=True) for c in f.calls],
                          "events": [asdict(e) for e in rec.snapshot()],
                          "invariant_violations": f.check_invariants()}
                (state / f"host{i:02d}" / "record.json").write_text(json.dumps(record))
        finally:
            for f in fleets:
                f.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
