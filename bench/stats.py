"""Percentiles and summaries of small samples (nearest-rank on sorted data, no numpy)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0..100): the smallest value with at least p% at or below it."""
    if not values:
        return None
    data = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(data)))
    return data[min(rank, len(data)) - 1]


def summary(values: Sequence[float]) -> dict[str, float | int | None]:
    return {
        "n": len(values),
        "min": min(values) if values else None,
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "max": max(values) if values else None,
        "mean": sum(values) / len(values) if values else None,
    }
