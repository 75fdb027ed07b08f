"""mypy over orchestrator/, held to a recorded baseline that only shrinks.

    python scripts/mypy_baseline.py            # check: fails when any file has more errors than recorded
    python scripts/mypy_baseline.py --update   # record the current counts in mypy-baseline.txt

mypy runs with the configuration of pyproject.toml ([tool.mypy]). The baseline holds one line per
file with errors, `COUNT PATH`; a file not listed is held to 0. The check fails when a file has
more errors than its line says (a new file with errors included) and prints those files' errors.
When files have fewer, it passes and says so, so that `--update` can lock the gain in. A file moved
or renamed counts as new: record the baseline again in the commit that moves it.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "mypy-baseline.txt"
HEADER = (
    "# mypy errors per file of orchestrator/ (scripts/mypy_baseline.py; [tool.mypy] in pyproject.toml).\n"
    "# A file may only go down; run `python scripts/mypy_baseline.py --update` after fixing some.\n"
)
#: `path:line: error: message  [code]` (a `path:line:col:` form too); notes and the summary are not errors.
ERROR = re.compile(r"^(?P<path>[^:\s][^:]*\.pyi?):\d+(?::\d+)?: error: ")


def count_errors(output: str) -> tuple[Counter[str], dict[str, list[str]]]:
    """Errors per file in mypy's output, and each file's error lines."""
    counts: Counter[str] = Counter()
    lines: dict[str, list[str]] = {}
    for line in output.splitlines():
        m = ERROR.match(line)
        if m:
            path = m["path"].replace("\\", "/")
            counts[path] += 1
            lines.setdefault(path, []).append(line)
    return counts, lines


def read_baseline(text: str) -> Counter[str]:
    base: Counter[str] = Counter()
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        count, _, path = line.partition(" ")
        if not count.isdigit() or not path.strip():
            raise ValueError(f"{BASELINE.name} line {n}: expected `COUNT PATH`, got {raw!r}")
        base[path.strip()] = int(count)
    return base


def render_baseline(counts: Counter[str]) -> str:
    return HEADER + "".join(f"{counts[p]} {p}\n" for p in sorted(counts) if counts[p] > 0)


def compare(current: Counter[str], base: Counter[str]) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]]:
    """Files worse than the baseline and files better, each as {path: (recorded, now)}."""
    worse = {p: (base[p], n) for p, n in current.items() if n > base[p]}
    better = {p: (n, current[p]) for p, n in base.items() if current[p] < n}
    return worse, better


def run_mypy() -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-color-output", "--no-error-summary"],
                          cwd=ROOT, capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/mypy_baseline.py", description=__doc__.split("\n")[0])
    ap.add_argument("--update", action="store_true", help=f"write the current counts to {BASELINE.name}")
    args = ap.parse_args(argv)

    rc, output = run_mypy()
    current, lines = count_errors(output)
    # exit 1 is "errors found"; anything else (2: a crash, a bad configuration) is not a count
    if rc not in (0, 1) or (rc == 1 and not current):
        print(output, end="", file=sys.stderr)
        print(f"mypy-baseline: mypy exited {rc} without a list of errors", file=sys.stderr)
        return 2
    total = sum(current.values())
    if args.update:
        BASELINE.write_text(render_baseline(current))
        print(f"mypy-baseline: recorded {total} errors in {len(current)} files in {BASELINE.name}")
        return 0

    base = read_baseline(BASELINE.read_text()) if BASELINE.exists() else Counter()
    worse, better = compare(current, base)
    if worse:
        for path in sorted(worse):
            print("\n".join(lines[path]))
        print(f"mypy-baseline: {len(worse)} file(s) have more errors than {BASELINE.name} records:", file=sys.stderr)
        for path, (was, now) in sorted(worse.items()):
            print(f"  {path}: {was} -> {now}", file=sys.stderr)
        return 1
    if better:
        gained = sum(was - now for was, now in better.values())
        print(f"mypy-baseline: {gained} error(s) fewer than recorded in {len(better)} file(s); "
              f"run `python scripts/mypy_baseline.py --update` to keep them out")
    print(f"mypy-baseline: {total} errors in {len(current)} files, none above {BASELINE.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
