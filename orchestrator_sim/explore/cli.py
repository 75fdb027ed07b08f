"""The explorer's one command line (`python -m orchestrator_sim.explore`, `make explore`) and its
report (a markdown summary with every violating schedule's reproduction line and evidence, and the
same as JSON).

    python -m orchestrator_sim.explore --seed 1234            # one seed, verbose
    python -m orchestrator_sim.explore --seeds 50 --jobs 2     # seeds 0..49
    python -m orchestrator_sim.explore --seeds 100 --fast      # the CI form of each schedule
    python -m orchestrator_sim.explore --sweep writes|inflight|all [--points 1,5,9]
    python -m orchestrator_sim.explore --hole all              # the known-hole schedules
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import logging
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from orchestrator_sim.explore.common import ROOT
from orchestrator_sim.explore.judge import Result, baseline, run_hole, run_seed, sweep_point
from orchestrator_sim.explore.schedule import HOLES, draw


# ----------------------------------------------------------------------------- reports
def summarize(results: list[Result]) -> dict[str, Any]:
    kinds = collections.Counter(k for r in results for k in r.kinds)
    return {
        "schedules": len(results),
        "by_kind": dict(sorted(kinds.items())),
        "violating": [asdict(r) for r in results if not r.ok],
        "seconds": round(sum(r.seconds for r in results), 1),
    }


def write_report(results: list[Result], path: Path, title: str, wall_s: float | None = None) -> dict[str, Any]:
    summary = summarize(results)
    if wall_s is not None:
        summary["wall_seconds"] = round(wall_s, 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"# {title}", "", f"schedules: {summary['schedules']}; by kind: "
             + ", ".join(f"{k} {n}" for k, n in summary["by_kind"].items())
             + f"; violating: {len(summary['violating'])}; total {summary['seconds']} s of schedules"
             + (f"; {wall_s:.0f} s wall" if wall_s is not None else ""), ""]
    for r in results:
        if not r.ok:
            lines += [f"## {'seed ' + str(r.seed) if r.seed is not None else r.label}: {r.schedule}", "",
                      f"reproduce: `{r.repro}`", ""]
            lines += [f"- {v}" for v in r.violations] + [""]
            lines += ["commands:", ""] + [f"    {c}" for c in r.commands] + [""]
            lines += ["evidence (the runs' transitions that were not ok, each command's last lines):", ""]
            lines += [f"    {e}" for e in r.evidence] + [""]
    path.write_text("\n".join(lines) + "\n")
    path.with_suffix(".json").write_text(json.dumps({**summary, "results": [asdict(r) for r in results]}, indent=1, default=str))
    return summary


def print_result(r: Result) -> None:
    head = f"seed {r.seed}" if r.seed is not None else r.label
    status = "ok" if r.ok else "VIOLATION"
    print(f"{head:>14} {status:9} {r.seconds:5.1f}s {','.join(r.kinds):24} {r.first_outcome or '-':11} {r.schedule}", flush=True)
    if not r.ok:
        for v in r.violations:
            print(f"{'':15} {v}")
        for e in r.evidence:
            print(f"{'':15}   {e}")
        print(f"{'':15} reproduce: {r.repro}", flush=True)


def _seed_job(seed: int, workroot: str, fast: bool = False) -> Result:
    return run_seed(seed, Path(workroot), fast=fast)


def _hole_job(name: str, workroot: str) -> Result:
    return run_hole(name, Path(workroot))


def _sweep_job(kind: str, point: int, base: dict[str, Any], workroot: str) -> Result:
    return sweep_point(kind, point, base, Path(workroot))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m orchestrator_sim.explore", description="A seeded schedule explorer (FoundationDB/Jepsen style) for the product's one promise:")
    p.add_argument("--seed", type=int, default=None, help="first seed (alone: run just this seed, verbosely)")
    p.add_argument("--seeds", type=int, default=None, help="how many seeds, from --seed (default 0)")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--sweep", choices=["writes", "inflight", "all"], default=None)
    p.add_argument("--hole", action="append", default=None,
                   help=f"run a known-hole schedule by name (or 'all'): {', '.join(HOLES)}")
    p.add_argument("--fast", action="store_true", help="the CI form of each seed's schedule (shorter cold starts, "
                   "base hosts without gpu02's run first)")
    p.add_argument("--door", action="append", default=None,
                   help="with --seeds: only the seeds whose schedule enters by this door (repeatable)")
    p.add_argument("--points", default=None, help="sweep only these points (comma separated)")
    p.add_argument("--report", default=str(ROOT / ".state" / "explore" / "report.md"))
    p.add_argument("--workdir", default=None)
    args = p.parse_args(argv)
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)  # a killed client's socket errors
    t0 = time.monotonic()
    workroot = Path(args.workdir or tempfile.mkdtemp(prefix="explore-"))
    workroot.mkdir(parents=True, exist_ok=True)
    results: list[Result] = []
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs) if args.jobs > 1 else None

    def collect(futs: list[Any]) -> None:
        for f in futs:
            r = f.result() if isinstance(f, concurrent.futures.Future) else f  # a job's, or run here
            print_result(r)
            results.append(r)

    if args.hole:
        names = list(HOLES) if "all" in args.hole else args.hole
        if pool:
            collect([pool.submit(_hole_job, n, str(workroot)) for n in names])
        else:
            for n in names:
                collect([run_hole(n, workroot, verbose=len(names) == 1)])
        title = f"known holes: {len(names)} schedules"
    elif args.sweep:
        base = baseline(workroot)
        writes = len(base["writes"])
        muts = len(base["mutating_calls"])
        print(f"uninterrupted rollout: {writes} journal writes, {muts} mutating calls", flush=True)
        jobs: list[tuple[str, int]] = []
        if args.sweep in ("writes", "all"):
            pts = [int(x) for x in args.points.split(",")] if args.points else list(range(1, writes + 1))
            jobs += [("after", k) for k in pts]
        if args.sweep in ("inflight", "all"):
            pts = [int(x) for x in args.points.split(",")] if args.points and args.sweep == "inflight" else list(range(1, muts + 1))
            jobs += [("inflight", k) for k in pts]
        if pool:
            collect([pool.submit(_sweep_job, k, n, base, str(workroot)) for k, n in jobs])
        else:
            for k, n in jobs:
                collect([sweep_point(k, n, base, workroot)])
        title = f"crash sweep ({args.sweep}): {len(results)} kill points"
    else:
        first = args.seed if args.seed is not None else 0
        n = args.seeds if args.seeds is not None else (1 if args.seed is not None else 20)
        seeds = list(range(first, first + n))
        if args.door:
            seeds = [sd for sd in seeds if draw(sd).door in args.door]
        if n == 1:
            r = run_seed(seeds[0], workroot, verbose=True, fast=args.fast)
            collect([r])
        elif pool:
            collect([pool.submit(_seed_job, sd, str(workroot), args.fast) for sd in seeds])
        else:
            for sd in seeds:
                collect([run_seed(sd, workroot, fast=args.fast)])
        title = f"schedule explorer: seeds {first}..{first + n - 1}"
    if pool:
        pool.shutdown()
    summary = write_report(results, Path(args.report), title, time.monotonic() - t0)
    print(f"{summary['schedules']} schedules ({', '.join(f'{k} {v}' for k, v in summary['by_kind'].items())}); "
          f"{len(summary['violating'])} violating; report: {args.report}")
    return 1 if summary["violating"] else 0


if __name__ == "__main__":
    sys.exit(main())
