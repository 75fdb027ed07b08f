"""`python -m orchestrator_sim serve --state-dir DIR [--speed X] [--fault NAME ...] [--host gpu03 ...]`

Runs the simulator in the foreground until SIGTERM/SIGINT. Writes DIR/inventory.yaml, DIR/sim.env
(the ORCHESTRATOR_* lines: tokens, the inventory path and the time scale), DIR/ready once every server listens,
and, as it goes, DIR/calls.jsonl (every call, env values fingerprinted) and DIR/timeline.jsonl.
`python -m orchestrator_sim faults` prints the fault table.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from orchestrator_sim.faults import FAULTS, parse_fault
from orchestrator_sim.fleet.sim_fleet import SimConfig, SimFleet


def _serve(args: argparse.Namespace) -> int:
    for spec in args.fault:
        parse_fault(spec)  # fail early on a typo
    state = Path(args.state_dir)
    state.mkdir(parents=True, exist_ok=True)
    (state / "ready").unlink(missing_ok=True)
    config = SimConfig(
        speed=args.speed,
        cold_start_s=args.cold_start,
        faults=tuple(args.fault),
        seed=args.seed,
        available_ram_gib=args.available_ram_gib,
        hosts=tuple(args.host or ("gpu02",)),
        **({"log_lines": args.log_lines} if args.log_lines is not None else {}),  # else ORCHESTRATOR_SIM_LOG_LINES
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with SimFleet(config, state_dir=state) as fleet:
        inventory = fleet.write_inventory(state / "inventory.yaml")
        # the drill's clock: without it the orchestrator sits through real 30-minute soaks
        env = {**fleet.env_for_orchestrator(), "ORCHESTRATOR_TIME_SCALE": f"{config.speed:g}"}
        (state / "sim.env").write_text("".join(f"{k}={v}\n" for k, v in env.items()))
        (state / "ready").write_text("ready\n")
        print(
            f"simulator listening: compose-manager {fleet.urls.compose_manager}, dashboard "
            f"{fleet.urls.dashboard}; inventory {inventory}; speed x{config.speed:g}; faults "
            f"{', '.join(config.faults) or 'none'}",
            flush=True,
        )
        while not stop.wait(0.2):
            pass
    (state / "ready").unlink(missing_ok=True)
    return 0


def _faults(_: argparse.Namespace) -> int:
    for f in FAULTS.values():
        arg = {"replica": ":r1|r2", "count": ":N", "replica-count": ":r1|r2[:N]", "none": ""}[f.arg]
        scope = "  (base hosts; name@gpuNN for one host)" if f.scope == "base" else ""
        print(f"{f.name}{arg}{scope}\n  symptom:  {f.symptom}\n  expected: {f.expected_end_state}\n")
    return 0


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a positive number of lines, not {text!r}")
    return n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestrator_sim", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the simulator until SIGTERM")
    serve.add_argument("--state-dir", required=True)
    serve.add_argument("--speed", type=float, default=600.0, help="simulation seconds per real second")
    serve.add_argument("--cold-start", type=float, default=3000.0, help="engine cold start, simulation seconds")
    serve.add_argument(
        "--fault", action="append", default=[], help="fault spec (name, name:arg, either with @host), repeatable"
    )
    serve.add_argument(
        "--host", action="append", default=[], help="a simulated host (gpu02, gpu03, gpu04, gpu23), repeatable; default gpu02"
    )
    serve.add_argument("--seed", type=int, default=None)
    serve.add_argument("--available-ram-gib", type=float, default=1223)
    serve.add_argument("--log-lines", type=_positive, default=None,
                       help="docker's log rotation: every container keeps only its last N log lines "
                            "(default: ORCHESTRATOR_SIM_LOG_LINES, else no rotation)")
    serve.set_defaults(func=_serve)
    faults = sub.add_parser("faults", help="print the fault table")
    faults.set_defaults(func=_faults)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
