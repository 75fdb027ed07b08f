"""P6 start-up: how long `orchestrate` takes before it does anything, against `python -c pass`.

Each command runs as its own process (the venv's `orchestrate` entry point, as an operator types
it), in rounds: every round runs `python -c pass` and each command once, in the same order, so that
a load change on a shared machine touches every command alike. Per command: the median over the
rounds of the CPU time (user + system of the child, from getrusage) and of the wall time, and the
ratio of each median to `python -c pass`'s (CPU ratios are the figure to trust on a loaded machine:
waiting for a core does not count in them).

Commands: `--help` and `--version` (goal: at most 10 times `python -c pass`), `plan gpu02 --tag ...`
(offline, the shipped inventory) and `status` (goal: at most 25 times), and `runs` (no goal, shown
beside `status`); `status` and `runs` read a SQLite journal made here with `create_run`. Every call
computes its answer (nothing is kept between calls). The commands run without
PYTHONDONTWRITEBYTECODE (the warm-up round writes the .pyc files an installed package has); a
"before" installation keeps a state dir of its own.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LIMITS = {"--help": 10.0, "--version": 10.0, "plan": 25.0, "status": 25.0}


def _orchestrate() -> list[str]:
    exe = Path(sys.executable).with_name("orchestrate")
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-m", "orchestrator.cli"]  # pragma: no cover - not installed as a script


def _journal(state: Path) -> None:
    """A journal with three runs (what `status` and `runs` read)."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from orchestrator.journal import open_journal\n"
        "j = open_journal(str(Path(sys.argv[1]) / 'journal.sqlite3'))\n"
        "for i in range(3):\n"
        "    j.create_run(host='gpu02', runbook='gpu02-glm53-w4afp8-long-context', tag=f'v0.0.30{i}', kind='rollout',\n"
        "                 state='preflight', context={})\n"
        "j.close()\n"
    )
    subprocess.run([sys.executable, "-c", code, str(state)], check=True, cwd=ROOT)


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[1:])} exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-300:]}")
    return cpu, wall, proc.returncode


def run(*, rounds: int = 5, warm: bool = True, before: str | None = None, progress: Any = None) -> dict[str, Any]:
    """`before`: another `orchestrate` (e.g. the main checkout's venv, $BENCH_BEFORE_ORCHESTRATE) run
    in the same rounds, for figures before and after side by side."""
    before = before or os.environ.get("BENCH_BEFORE_ORCHESTRATE")
    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="bench-p6-"))
    try:
        state = tmp / "state"
        state.mkdir()
        # (PYTHONDONTWRITEBYTECODE dropped: the warm-up round writes the .pyc files an installed package has)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_") and k != "PYTHONDONTWRITEBYTECODE"}
        env.update(ORCHESTRATOR_STATE_DIR=str(state), ORCHESTRATOR_INVENTORY=str(ROOT / "config" / "hosts.yaml"))
        _journal(state)
        # the "before" installation keeps its own state dir (its own journal)
        env_before = dict(env, ORCHESTRATOR_STATE_DIR=str(tmp / "state-before"))
        orch = _orchestrate()
        commands: dict[str, list[str]] = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "--help": [*orch, "--help"],
            "--version": [*orch, "--version"],
            "plan": [*orch, "plan", "gpu02", "--tag", "v0.0.300"],
            "status": [*orch, "status"],
            "runs": [*orch, "runs"],
        }
        if before:
            (tmp / "state-before").mkdir()
            _journal(tmp / "state-before")
            for name in ("--help", "--version", "plan", "status", "runs"):
                commands[f"{name} (before)"] = [before, *commands[name][len(orch):]]

        def env_of(name: str) -> dict[str, str]:
            return env_before if name.endswith("(before)") else env

        for name, argv in commands.items() if warm else ():  # warm the page cache and the .pyc files: not counted
            _timed(argv, env_of(name))
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for r in range(rounds):
            for name, argv in commands.items():
                cpu, wall, _ = _timed(argv, env_of(name))
                samples[name].append((cpu, wall))
            if progress is not None:
                progress(f"P6 round {r + 1}/{rounds}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    base_cpu = statistics.median(c for c, _ in samples["python -c pass"])
    base_wall = statistics.median(w for _, w in samples["python -c pass"])
    rows = []
    for name, ss in samples.items():
        cpu = statistics.median(c for c, _ in ss)
        wall = statistics.median(w for _, w in ss)
        limit = LIMITS.get(name)  # (the "before" rows have none)
        rows.append({
            "command": name, "cpu_s": cpu, "wall_s": wall,
            "cpu_ratio": cpu / base_cpu if base_cpu else None, "wall_ratio": wall / base_wall if base_wall else None,
            "limit_ratio": limit,
            "met": None if limit is None else bool(base_cpu and cpu / base_cpu <= limit),
            "samples": ss,
        })
    return {"rounds": rounds, "rows": rows, "load_avg": os.getloadavg(), "real_s": time.monotonic() - t0}


if __name__ == "__main__":  # pragma: no cover
    import json

    print(json.dumps(run(), indent=1))
