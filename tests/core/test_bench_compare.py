"""bench.compare's table: each benchmark row once, each side's rounds in order, a row one side
lacks shown as –."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/ sits beside the package

from bench.compare import side_by_side  # noqa: E402  # after the path


def _p4(cpu: float) -> dict:
    return {"P4": {"cpu_s_per_min": cpu, "cpu_ms_per_poll": 1.0, "poll_interval_s": 10.0, "window_s": 60.0,
                   "peak_rss_mib": 50.0, "goal": {"cpu_met": True, "rss_met": True}}}


def test_rows_line_up_by_benchmark_and_round():
    table = side_by_side([_p4(0.1), _p4(0.2)], [_p4(0.3), {}], "f6ef9a0")
    lines = table.splitlines()
    assert lines[0] == "| | what | f6ef9a0 | this checkout |"
    [cpu] = [line for line in lines if "CPU-s per minute" in line]
    assert "0.100 CPU-s/min" in cpu.split("|")[3] and "0.200 CPU-s/min" in cpu.split("|")[3]
    assert cpu.split("|")[4].strip().startswith("0.300 CPU-s/min") and cpu.split("|")[4].strip().endswith("–")


def test_a_result_the_report_cannot_read_is_left_out_not_a_crash():
    assert side_by_side([{"P4": {"unexpected": 1}}], [{"P6": None}], "base").count("\n") == 1
