"""bench.compare's table: each benchmark row once, each side's rounds in order, a row one side
lacks shown as –, a row whose goal changed between revisions lined up with itself."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/ sits beside the package

from bench.compare import rows_by_key, side_by_side  # noqa: E402  # after the path


def test_rows_line_up_by_benchmark_round_and_changed_goal():
    base = [rows_by_key([["P1", "own CPU ≤ 0.3 s per replica", "0.22 s", "yes"]]),
            rows_by_key([["P1", "own CPU ≤ 0.3 s per replica", "0.25 s", "yes"]])]
    head = [rows_by_key([["P1", "own CPU ≤ 2 s per replica", "0.47 s", "yes"], ["P6", "start-up", "3 ×", "yes"]]), {}]
    lines = side_by_side(base, head, "f6ef9a0").splitlines()
    assert lines[0] == "| | what | f6ef9a0 | this checkout |"
    assert lines[2] == "| P1 | own CPU ≤ goal s per replica | 0.22 s ⁄ 0.25 s | 0.47 s ⁄ – |"
    assert lines[3] == "| P6 | start-up | – ⁄ – | 3 × ⁄ – |"
