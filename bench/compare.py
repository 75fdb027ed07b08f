"""`python -m bench.compare --base REV [--only P1,P4] [--quick] [--rounds N]`: the benchmarks of this
checkout and of another revision, side by side, in one sitting.

The other revision runs from a git worktree of its own with its own venv (`make install`), so each
side measures its own code with its own benchmark drivers. The two alternate (base, head, base,
head …) so that a machine whose load changes during the sitting weighs on both alike; every row
shows each round's figure. Compare CPU figures rather than wall time on a shared machine
(docs/performance.md, "Comparing two revisions").
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


#: each side's own report reads each side's own results (their shapes differ between revisions)
_ROWS = ("import json, sys; from bench.report import summary_rows; "
         "print(json.dumps([[str(c) for c in r] for r in summary_rows(json.load(open(sys.argv[1])))]))")


def _run(checkout: Path, only: str, quick: bool, out: Path) -> dict[tuple[str, str], str]:
    """(benchmark, what) -> measured, from `checkout`'s benchmarks and its own report of them."""
    python = str(checkout / ".venv" / "bin" / "python")
    subprocess.run([python, "-m", "bench", "--only", only, "--out", str(out)] + (["--quick"] if quick else []),
                   cwd=checkout, check=False)
    path = out / "latest.json"
    if not path.is_file():
        return {}
    r = subprocess.run([python, "-c", _ROWS, str(path)], cwd=checkout, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        print(f"bench.compare: {checkout}'s report could not read its results:\n{r.stderr[-1500:]}", file=sys.stderr)
        return {}
    return rows_by_key(json.loads(r.stdout))


def rows_by_key(rows: list[list[str]]) -> dict[tuple[str, str], str]:
    """The same row under another goal (a goal since changed) lines up with it: the key drops the bound."""
    return {(bench, re.sub(r"≤ [0-9.]+", "≤ goal", what)): measured for bench, what, measured, _met in rows}


def side_by_side(base: list[dict[tuple[str, str], str]], head: list[dict[tuple[str, str], str]], base_name: str) -> str:
    keys = list(dict.fromkeys(k for rows in head + base for k in rows))
    lines = [f"| | what | {base_name} | this checkout |", "|---|---|---|---|"]
    for key in keys:
        b = " ⁄ ".join(r.get(key, "–") for r in base)
        h = " ⁄ ".join(r.get(key, "–") for r in head)
        lines.append(f"| {key[0]} | {key[1]} | {b} | {h} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="the revision to compare with (e.g. f6ef9a0)")
    ap.add_argument("--only", default="P1,P3,P4,P6", help="the benchmarks, as `python -m bench --only` takes them")
    ap.add_argument("--quick", action="store_true", help="each side's `--quick` run")
    ap.add_argument("--rounds", type=int, default=2, help="how many times each side runs, alternating")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "compare.md"), help="where the table goes")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
        base_dir = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(base_dir), args.base], cwd=ROOT, check=True)
        try:
            subprocess.run(["make", "install"], cwd=base_dir, check=True, stdout=subprocess.DEVNULL)
            base: list[dict[tuple[str, str], str]] = []
            head: list[dict[tuple[str, str], str]] = []
            for n in range(args.rounds):
                base.append(_run(base_dir, args.only, args.quick, Path(tmp) / f"base-{n}"))
                head.append(_run(ROOT, args.only, args.quick, Path(tmp) / f"head-{n}"))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base_dir)], cwd=ROOT, check=False)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    table = (f"# {args.base} against this checkout ({commit}), {args.rounds} rounds each, alternating"
             f"{', quick' if args.quick else ''}\n\n" + side_by_side(base, head, args.base) + "\n")
    Path(args.out).write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
