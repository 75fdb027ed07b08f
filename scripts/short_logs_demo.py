"""`orchestrate demo` with every engine keeping only its last N log lines (issue 21), for each demo
fault the suite's demo and fault tests cover, each checked against its expected exit code.

    python scripts/short_logs_demo.py [--lines 500] [--jobs 2] [--speed 3000] [--only NAME ...]

Exit 0 when every case ended as expected; one line per case (fault, exit, expected, seconds).
Used by `make test-short-logs` (docs/explorer.md, "Short logs").
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXIT = {"DONE": 0, "ROLLED_BACK": 3, "HALTED": 4, "ABORTED": 5}

#: (name, demo arguments, expected outcome): tests/e2e/test_rollout_e2e.py's fault table, the r1
#: failure after r2 moved, the base tier's and the canary's demo tests.
CASES: list[tuple[str, list[str], str]] = [
    ("no fault", [], "DONE"),
    *[(f, ["--fault", f], "ABORTED") for f in ("budget-80pct", "budget-no-fit", "tag-too-recent", "tag-unknown", "peer-missing",
                                               "completion-fails")],
    *[(f, ["--fault", f], "ROLLED_BACK") for f in ("oom", "cuda-801", "rank-budget-wrong", "restart-loop", "cold-start-hang",
                                                   "cache-miss", "host-restore-missing", "labels-wrong", "perception-fails",
                                                   "dry-run-extra-recreate", "dry-run-extra-remove")],
    *[(f, ["--fault", f], "HALTED") for f in ("dry-run-not-dry", "dry-run-recreates", "oom:r1")],
    *[(f, ["--fault", f], "DONE") for f in ("busy-409:3", "server-500:3", "cut-before-effect", "cut-after-effect",
                                            "zombie-after-down", "force-recreate-ignored")],
    ("base tier, perception-fails@gpu04", ["--base-tier", "--fault", "perception-fails@gpu04"], "ROLLED_BACK"),
    ("canary, candidate-slower", ["--runbook", "gpu02-glm53-w4afp8-pdi2-canary", "--fault", "candidate-slower"], "ROLLED_BACK"),
]


def run_case(name: str, args: list[str], expected: str, lines: int, speed: float) -> tuple[str, int, str, float, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    env["ORCHESTRATOR_SIM_LOG_LINES"] = str(lines)
    with tempfile.TemporaryDirectory(prefix="short-logs-demo-") as state:
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "orchestrator.cli", "demo", "--speed", str(speed), "--state-dir", state, *args],
                           env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
        tail = (r.stdout + r.stderr).strip().splitlines()[-3:]
        return name, r.returncode, expected, time.monotonic() - t0, " | ".join(tail)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=500)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--speed", type=float, default=3000.0)
    ap.add_argument("--only", nargs="*", default=None)
    a = ap.parse_args()
    cases = [c for c in CASES if a.only is None or c[0] in a.only]
    bad = 0
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=a.jobs) as pool:
        for name, rc, expected, took, tail in pool.map(lambda c: run_case(*c, a.lines, a.speed), cases):
            good = rc == EXIT[expected]
            bad += not good
            print(f"{'ok  ' if good else 'FAIL'} {name}: exit {rc} (expected {EXIT[expected]}, {expected}) in {took:.0f} s"
                  + ("" if good else f"\n     {tail}"), flush=True)
    print(f"{len(cases) - bad} of {len(cases)} demo cases as expected with every engine keeping its last {a.lines} log lines, "
          f"{time.monotonic() - t0:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
