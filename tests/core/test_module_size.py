"""No module of the package or the simulator passes 500 lines (issue 26).

A module past 500 lines holds several jobs; split it by job. Every module is within the limit now
(the list of exceptions, OVERSIZED, is empty and stays so). The test fails when

- a module not listed passes 500 lines (split it, do not list it);
- a listed module grows past its count (the count is a ceiling: lower it when the module shrinks);
- a listed module is 500 lines or fewer, or no longer exists (take it off the list).
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 500
PACKAGES = ("orchestrator", "orchestrator_sim")

#: path -> the most lines it may have until it is split. Lower a count when the module shrinks.
OVERSIZED: dict[str, int] = {}


def line_counts(root: Path = ROOT) -> dict[str, int]:
    """Every module of the two packages -> its number of lines (as `wc -l` counts them)."""
    out = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            out[path.relative_to(root).as_posix()] = len(path.read_bytes().splitlines())
    return out


def problems(counts: dict[str, int], allowed: dict[str, int], limit: int = LIMIT) -> list[str]:
    out = []
    for path, n in sorted(counts.items()):
        if n <= limit:
            continue
        if path not in allowed:
            out.append(f"{path}: {n} lines, over {limit}: split it by job (issue 26)")
        elif n > allowed[path]:
            out.append(f"{path}: {n} lines, grew past its listed {allowed[path]}: split it rather than grow it")
    for path, ceiling in sorted(allowed.items()):
        if path not in counts:
            out.append(f"{path}: listed ({ceiling}) but gone: take it off OVERSIZED")
        elif counts[path] <= limit:
            out.append(f"{path}: {counts[path]} lines, no longer over {limit}: take it off OVERSIZED")
    return out


def test_no_module_passes_500_lines():
    found = problems(line_counts(), OVERSIZED)
    assert not found, "\n".join(found)


def test_the_check_can_fail(tmp_path):
    """A new long module, a listed one that grew, and a listed one already short are each named."""
    pkg = tmp_path / "orchestrator"
    pkg.mkdir()
    (pkg / "long.py").write_text("x = 1\n" * 501)
    (pkg / "grew.py").write_text("x = 1\n" * 600)
    (pkg / "short.py").write_text("x = 1\n" * 500)
    (tmp_path / "orchestrator_sim").mkdir()
    found = problems(line_counts(tmp_path), {"orchestrator/grew.py": 599, "orchestrator/short.py": 700,
                                             "orchestrator/gone.py": 900})
    assert [f.split(":")[0] for f in found] == ["orchestrator/grew.py", "orchestrator/long.py",
                                                "orchestrator/gone.py", "orchestrator/short.py"], found
    assert problems(line_counts(tmp_path), {"orchestrator/grew.py": 600, "orchestrator/long.py": 501}) == []
