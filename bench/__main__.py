"""`python -m bench [--quick | --smoke] [--only P1,P2,...]`: run the benchmarks, write bench/results/latest.{md,json}.

P1 overhead of a full rollout, P2 detection latency, P3 log-tail cost, P4 idle cost, P5 fleet
(planning 100 hosts, 20 concurrent rollouts), P6 the CLI's start-up. docs/performance.md explains each.
`--smoke` runs every benchmark with tiny windows (CI: tests/bench/test_bench_smoke.py), asserting no
timing, so that they cannot break unseen.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
ALL = ("P1", "P2", "P3", "P4", "P5", "P6")


def _log(t0: float) -> Callable[[str], None]:
    def progress(text: str) -> None:
        print(f"[{time.monotonic() - t0:7.1f}s] {text}", file=sys.stderr, flush=True)
    return progress


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a shorter run (~2 minutes): fewer trials, shorter windows")
    ap.add_argument("--smoke", action="store_true", help="every benchmark with tiny windows (~1 minute): checks they run, measures little")
    ap.add_argument("--only", default="", help="comma-separated subset of " + ",".join(ALL))
    ap.add_argument("--out", default=str(RESULTS), help="directory for latest.md and latest.json")
    args = ap.parse_args(argv)
    only = [x.strip().upper() for x in args.only.split(",") if x.strip()] or list(ALL)
    unknown = [x for x in only if x not in ALL]
    if unknown:
        ap.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(ALL)}")

    from bench import machine_info, p1_overhead, p2_detection, p3_logtail, p4_idle, p5_fleet, p6_startup, report

    t0 = time.monotonic()
    progress = _log(t0)
    smoke = args.smoke
    quick = args.quick or smoke
    runners: dict[str, Callable[[], dict[str, Any]]] = {
        "P1": lambda: p1_overhead.run(quick=quick, smoke=smoke, progress=progress),
        "P2": lambda: p2_detection.suite(quick=quick, smoke=smoke, progress=progress),
        "P3": lambda: p3_logtail.run(quick=quick, smoke=smoke, progress=progress),
        "P4": lambda: p4_idle.run(window_s=3.0 if smoke else 20.0 if quick else 60.0, progress=progress),
        "P5": lambda: p5_fleet.run(quick=quick, smoke=smoke, progress=progress),
        "P6": lambda: p6_startup.run(rounds=1 if smoke else 5, warm=not smoke, progress=progress),
    }
    mode = "smoke" if smoke else "quick" if quick else "full"
    results: dict[str, Any] = {"machine": machine_info.describe(), "mode": mode, "selected": only}
    failed = False
    for name in ALL:
        if name not in only:
            continue
        progress(f"{name} ...")
        started = time.monotonic()
        try:
            results[name] = runners[name]()
        except Exception as exc:  # noqa: BLE001 - one benchmark failing must not lose the others
            failed = True
            results[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
            progress(f"{name} failed: {exc}")
        progress(f"{name} done in {time.monotonic() - started:.1f} s")
    results["duration_s"] = time.monotonic() - t0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "latest.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    (out / "latest.md").write_text(report.render(results))
    progress(f"wrote {out / 'latest.md'} and {out / 'latest.json'}")
    print(report.render(results))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
