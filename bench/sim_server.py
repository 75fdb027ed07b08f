"""`python -m bench.sim_server --state-dir DIR`: a simulated gpu02 in its own process, with an engine
already in its cold start, for the idle-cost benchmark (P4).

It is `python -m orchestrator_sim serve` (same `SimFleet`, same servers, DIR/inventory.yaml,
DIR/sim.env with the ORCHESTRATOR_* settings, DIR/calls.jsonl), plus a setup done in simulated
time: the simulator's clock is a `WarpClock` that runs at `--setup-speed` while compose-manager
applies the new r2 (`compose up` of the long-context file at v0.0.300: pull, orphan stop, start),
then at exactly real time (speed 1) from the moment the new engine's process starts. With
`--cold-start 3000` (50 simulated minutes at speed 1) the engine is still loading when the window
ends. DIR/ready holds JSON: the simulation time and the UNIX time of the switch to speed 1.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path

from orchestrator_sim import SimConfig, SimFleet
from orchestrator_sim.compose_manager.repo import TARGET_FILE, TARGET_TAG

from bench.warp_clock import WarpClock

ENGINE = "model-sg-glm53-w4afp8-tp4-r2"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sim_server")
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--cold-start", type=float, default=3000.0)
    ap.add_argument("--setup-speed", type=float, default=2000.0)
    args = ap.parse_args(argv)
    state = Path(args.state_dir)
    state.mkdir(parents=True, exist_ok=True)
    (state / "ready").unlink(missing_ok=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    clock = WarpClock(args.setup_speed)
    fleet = SimFleet(SimConfig(speed=1.0, cold_start_s=args.cold_start, seed=11), state_dir=state / "sim")
    fleet.clock = clock
    fleet.host.clock = clock
    with fleet:
        fleet.host.begin_up({"tag": TARGET_TAG, "file": TARGET_FILE, "services": [ENGINE],
                             "env": fleet.dashboard_env}, None)
        deadline = time.monotonic() + 30
        while (c := fleet.host.container(ENGINE)) is None or c.state != "running":
            if time.monotonic() > deadline:
                print("the engine did not start", file=sys.stderr)
                return 1
            time.sleep(0.001)
        clock.set_speed(1.0)
        switched = {"sim_now": clock.monotonic(), "unix_now": time.time(), "engine_started_sim": c.started_at,
                    "cold_start_s": args.cold_start}
        fleet.write_inventory(state / "inventory.yaml")
        env = fleet.env_for_orchestrator()
        (state / "sim.env").write_text("".join(f"{k}={v}\n" for k, v in env.items()))
        (state / "ready").write_text(json.dumps(switched))
        while not stop.wait(0.2):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
