"""Interval arithmetic on the simulation time axis (seconds): union, clipping, measure.

The overhead benchmark splits a run's time line into disjoint parts (mandatory waits, polling
latency, time spent inside simulator calls, the rest); these helpers keep that exact.
"""

from __future__ import annotations

from collections.abc import Iterable

Interval = tuple[float, float]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, merged, non-empty intervals."""
    out: list[list[float]] = []
    for a, b in sorted((a, b) for a, b in intervals if b > a):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def clip(intervals: Iterable[Interval], lo: float, hi: float) -> list[Interval]:
    return union((max(a, lo), min(b, hi)) for a, b in intervals)


def subtract(intervals: Iterable[Interval], minus: Iterable[Interval]) -> list[Interval]:
    """`intervals` minus `minus` (both any lists; the result is merged)."""
    cut = union(minus)
    out: list[Interval] = []
    for a, b in union(intervals):
        start = a
        for c, d in cut:
            if d <= start or c >= b:
                continue
            if c > start:
                out.append((start, c))
            start = max(start, d)
            if start >= b:
                break
        if start < b:
            out.append((start, b))
    return out


def measure(intervals: Iterable[Interval]) -> float:
    return sum(b - a for a, b in union(intervals))
