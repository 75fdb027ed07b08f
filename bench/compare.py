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
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.report import summary_rows

ROOT = Path(__file__).resolve().parents[1]


def _run(checkout: Path, only: str, quick: bool, out: Path) -> dict[str, Any]:
    args = [str(checkout / ".venv" / "bin" / "python"), "-m", "bench", "--only", only, "--out", str(out)]
    subprocess.run(args + (["--quick"] if quick else []), cwd=checkout, check=False)
    path = out / "latest.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _rows(res: dict[str, Any]) -> dict[tuple[str, str], str]:
    """(benchmark, what) -> measured; a benchmark whose result this report cannot read is left out."""
    rows: dict[tuple[str, str], str] = {}
    for name in ("P1", "P2", "P3", "P4", "P5", "P6"):
        try:
            for bench, what, measured, _met in summary_rows({name: res.get(name)}):
                rows[(bench, what)] = str(measured)
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            continue
    return rows


def side_by_side(base: list[dict[str, Any]], head: list[dict[str, Any]], base_name: str) -> str:
    base_rows, head_rows = [_rows(r) for r in base], [_rows(r) for r in head]
    keys = list(dict.fromkeys(k for rows in head_rows + base_rows for k in rows))
    lines = [f"| | what | {base_name} | this checkout |", "|---|---|---|---|"]
    for key in keys:
        b = " ⁄ ".join(r.get(key, "–") for r in base_rows)
        h = " ⁄ ".join(r.get(key, "–") for r in head_rows)
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
            base: list[dict[str, Any]] = []
            head: list[dict[str, Any]] = []
            for n in range(args.rounds):
                base.append(_run(base_dir, args.only, args.quick, Path(tmp) / f"base-{n}"))
                head.append(_run(ROOT, args.only, args.quick, Path(tmp) / f"head-{n}"))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base_dir)], cwd=ROOT, check=False)
    commits = ", ".join(sorted({r.get("machine", {}).get("git_commit", "?")[:9] for r in head}))
    table = (f"# {args.base} against this checkout ({commits}), {args.rounds} rounds each, alternating"
             f"{', quick' if args.quick else ''}\n\n" + side_by_side(base, head, args.base) + "\n")
    Path(args.out).write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
