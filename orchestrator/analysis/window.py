"""Window arithmetic: what happened on one replica between the first and the last scrape of a
window, from cumulative Prometheus counters and histograms. Pure (no I/O, no clock). Prometheus' rules:
- a counter value lower than the one before is a reset (the engine restarted): that step contributes
  the new value whole (PromQL's `increase()`); a histogram resets as a whole when its count or any
  bucket goes down;
- a quantile is interpolated inside the bucket that holds the rank of the window's increased
  buckets (`histogram_quantile()`), never from the lifetime totals;
- no samples, no number: a quantile of an empty histogram or a ratio over zero requests is `None`
  ("not enough traffic"); a series the replica does not carry, or carries from only part of the
  window, gives no value at all: unknown is not zero.
The window is also kept per scrape interval (`Interval`): the judge resamples those.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.analysis.metric_defs import ABORTED, HTTP_5XX, HTTP_SERVED, METRICS, REQUESTS, MetricDef


class WindowError(ValueError):
    """The scrapes cannot be combined (a histogram whose bucket layout changed inside the window)."""


@dataclass(frozen=True)
class Histogram:
    """Cumulative buckets `(le, count)` sorted by `le`, the last `+Inf`; `count`; `sum`."""

    buckets: tuple[tuple[float, float], ...]
    count: float
    sum: float = 0.0

    def layout(self) -> tuple[float, ...]:
        return tuple(le for le, _ in self.buckets)


@dataclass(frozen=True)
class Scrape:
    """One read of one replica's /metrics at run-clock time `at` (seconds)."""

    at: float
    counters: Mapping[str, float] = field(default_factory=dict)
    histograms: Mapping[str, Histogram] = field(default_factory=dict)
    #: point-in-time values (a queue's depth, a GPU's free memory): judged by their extreme
    gauges: Mapping[str, float] = field(default_factory=dict)


def counter_increase(values: Sequence[float]) -> tuple[float, int]:
    """(increase over the series, resets seen). A drop is a restart: the new value counts whole."""
    pairs = list(zip(values, values[1:]))
    return sum((_step(prev, cur) for prev, cur in pairs), 0.0), sum(cur < prev for prev, cur in pairs)


def _step(prev: float, cur: float) -> float:
    return cur if cur < prev else cur - prev


def _hist_reset(prev: Histogram, cur: Histogram) -> bool:
    return cur.count < prev.count or any(c < p for (_, p), (_, c) in zip(prev.buckets, cur.buckets))


def _hist_step(prev: Histogram, cur: Histogram) -> Histogram:
    if _hist_reset(prev, cur):
        return cur
    return Histogram(tuple((le, c - p) for (le, p), (_, c) in zip(prev.buckets, cur.buckets)),
                     cur.count - prev.count, cur.sum - prev.sum)


def histogram_increase(series: Sequence[Histogram]) -> tuple[Histogram, int]:
    """(the buckets' increase over the series, resets seen). Needs at least one histogram; a
    single one is an increase of nothing (the window has no width)."""
    if not series:
        raise WindowError("no histogram to take an increase of")
    layout = series[0].layout()
    counts = [0.0] * len(layout)
    total = sum_ = 0.0
    resets = 0
    for prev, cur in zip(series, series[1:]):
        if cur.layout() != layout:
            raise WindowError(f"the histogram's buckets changed inside the window ({len(layout)} -> {len(cur.layout())} "
                              f"buckets): the engine restarted with another configuration")
        resets += _hist_reset(prev, cur)
        step = _hist_step(prev, cur)
        counts = [a + c for a, (_, c) in zip(counts, step.buckets)]
        total += step.count
        sum_ += step.sum
    return Histogram(tuple(zip(layout, counts)), total, sum_), resets


def quantile(q: float, h: Histogram) -> float | None:
    """`histogram_quantile(q, h)`: None without observations; inside the `+Inf` bucket, the highest
    finite bound (what Prometheus answers: the true value is only known to be above it)."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} is not within [0, 1]")
    if not h.buckets or h.buckets[-1][1] <= 0:
        return None
    total = h.buckets[-1][1]
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for i, (le, count) in enumerate(h.buckets):
        if count >= rank and count > prev_count:
            if math.isinf(le):
                return h.buckets[i - 1][0] if i > 0 else None
            if i == 0 and le <= 0:
                return le
            return prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count)
        prev_le, prev_count = le, count
    return h.buckets[-2][0] if len(h.buckets) > 1 else None


def share_above(x: float, h: Histogram) -> float | None:
    """The share of observations above `x`, the count at `x` interpolated linearly inside its bucket
    (as `quantile` does); None without observations. Above the highest finite bound every
    observation of the `+Inf` bucket counts as above: an upper estimate."""
    if not h.buckets or h.buckets[-1][1] <= 0:
        return None
    prev_le, prev_count = 0.0, 0.0
    for le, count in h.buckets:
        if x <= le:
            below = prev_count if math.isinf(le) else prev_count + (count - prev_count) * (x - prev_le) / (le - prev_le)
            return 1.0 - below / h.buckets[-1][1]
        prev_le, prev_count = le, count
    return 0.0


@dataclass(frozen=True)
class Interval:
    """What one replica did between two consecutive scrapes: the unit the judge resamples
    (orchestrator/analysis/verdict.py). Only series carried by both scrapes are in it."""

    seconds: float
    counters: Mapping[str, float]
    histograms: Mapping[str, Histogram]


@dataclass(frozen=True)
class ReplicaWindow:
    """What one replica did inside the window: increases of every counter and histogram, in total
    and per scrape interval."""

    replica: str
    seconds: float
    scrapes: int
    resets: int
    counters: Mapping[str, float]
    histograms: Mapping[str, Histogram]
    #: gauge -> (lowest, highest, scrapes carrying it) over the window
    gauges: Mapping[str, tuple[float, float, int]] = field(default_factory=dict)
    intervals: tuple[Interval, ...] = ()
    #: series carried by some of the engine's scrapes but not all (first seen mid-window, or gone
    #: before its end): their increase over the window is unknown, never what the later scrapes say
    partial: frozenset[str] = frozenset()


def _increases(series: Sequence[Mapping[str, Any]], increase: Callable[[list[Any]], tuple[Any, int]],
               partial: set[str]) -> tuple[dict[str, Any], int]:
    """Each name's increase over the scrapes that all carry it, and the most resets seen; a name
    only some of them carry goes to `partial` (it first appeared, or vanished, mid-window)."""
    out: dict[str, Any] = {}
    resets = 0
    for name in sorted({n for scrape in series for n in scrape}):
        carried = [scrape[name] for scrape in series if name in scrape]
        if len(carried) < len(series):
            partial.add(name)
            continue
        out[name], r = increase(carried)
        resets = max(resets, r)
    return out, resets


def window_of(replica: str, scrapes: Sequence[Scrape]) -> ReplicaWindow:
    """The increases between the first and last scrape (sorted by time), and per interval between
    consecutive engine scrapes. A series must be carried by every engine scrape of the window: one
    that appears mid-window (or vanishes) is `partial`, its increase unknown. An engine that was
    briefly unreadable added no scrape at all, so it leaves no gap here."""
    ordered = sorted(scrapes, key=lambda s: s.at)
    seconds = ordered[-1].at - ordered[0].at if ordered else 0.0
    # the engine's scrapes (a DCGM read merged into the series is not one of the engine's)
    engine = [s for s in ordered if s.counters or s.histograms]
    partial: set[str] = set()
    counters, counter_resets = _increases([s.counters for s in engine], counter_increase, partial)
    hists, hist_resets = _increases([s.histograms for s in engine], histogram_increase, partial)
    resets = max(counter_resets, hist_resets)
    intervals = tuple(
        Interval(cur.at - prev.at,
                 {n: _step(prev.counters[n], cur.counters[n]) for n in counters},
                 {n: _hist_step(prev.histograms[n], cur.histograms[n]) for n in hists})
        for prev, cur in zip(engine, engine[1:]))
    gauges: dict[str, tuple[float, float, int]] = {}
    for name in sorted({n for s in ordered for n in s.gauges}):
        vals = [s.gauges[name] for s in ordered if name in s.gauges]
        gauges[name] = (min(vals), max(vals), len(vals))
    return ReplicaWindow(replica, seconds, len(engine) or len(ordered), resets, counters, hists, gauges,
                         intervals, frozenset(partial))


@dataclass(frozen=True)
class Measurement:
    """A metric's value over a replica's window and how many observations it rests on."""

    value: float | None
    samples: float
    #: a series the value needs that the window does not know: the replica's /metrics never
    #: carried it (a wrong engine, a renamed metric, a build without it), or carried it in only
    #: some scrapes. Unknown, never zero: the gate is inconclusive.
    absent: str | None = None
    partial: bool = False


def value_of(d: MetricDef, counters: Mapping[str, float], histograms: Mapping[str, Histogram],
             seconds: float) -> tuple[float | None, float]:
    """(value, observations) of a counter or histogram metric over summed increases; the series
    it needs are there (`measure` checks that first)."""
    if d.hist:
        h = histograms[d.source]
        if d.kind == "quantile":
            return quantile(d.q or 0.0, h), h.count
        if d.kind == "mean":
            return (h.sum / h.count if h.count > 0 else None), h.count
        return share_above(d.threshold or 0.0, h), h.count
    if d.kind == "http_5xx_rate":
        served = counters[HTTP_SERVED]
        return (counters[HTTP_5XX] / served if served > 0 else None), served
    requests = counters[REQUESTS]
    if d.kind == "request_rate":
        return (requests / seconds if seconds > 0 else None), requests
    if requests <= 0:
        return None, 0.0
    if d.kind == "per_request":
        return counters[d.source] / requests, requests
    share = min(1.0, counters[ABORTED] / requests)
    return (share if d.kind == "error_rate" else 1.0 - share), requests


def needs(d: MetricDef) -> tuple[str, ...]:
    """The series a counter or histogram metric is computed from."""
    if d.hist:
        return (d.source,)
    if d.kind == "http_5xx_rate":
        return (HTTP_SERVED, HTTP_5XX)
    return (REQUESTS,) if d.source == REQUESTS else (REQUESTS, d.source)


def measure(metric: str, w: ReplicaWindow) -> Measurement:
    d = METRICS[metric]
    if d.kind in ("gauge_min", "gauge_max"):
        g = w.gauges.get(d.source)
        if g is None:
            return Measurement(None, 0.0, d.source if w.scrapes else None)
        return Measurement((g[0] if d.kind == "gauge_min" else g[1]) / d.scale, float(g[2]))
    for name in needs(d):
        if name in w.partial:
            return Measurement(None, 0.0, name, partial=True)
        if name not in w.counters and name not in w.histograms:
            return Measurement(None, 0.0, name if w.scrapes else None)
    value, samples = value_of(d, w.counters, w.histograms, w.seconds)
    return Measurement(value, samples)


def ratio(candidate: float, control: float) -> float:
    """candidate / control; 0/0 is 1 (equal), x/0 with x > 0 is infinite (worse without bound)."""
    if control == 0:
        return 1.0 if candidate == 0 else math.inf
    return candidate / control
