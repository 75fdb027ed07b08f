"""Gates over windows, and the readout: candidate vs control per metric, each with an interval.
Pure and deterministic. Three verdicts, never two: PASS, FAIL and INCONCLUSIVE.

The judge: a seeded bootstrap over the window's scrape intervals (window.py keeps each replica's
window per interval). A resample draws as many intervals as the replica has, with replacement, sums
them and computes the gate's statistic on the sum exactly as on the whole window; candidate and
control are resampled independently, and the 2.5th and 97.5th percentiles of `RESAMPLES` resampled
ratios (or values) are the 95 % interval. Not Mann-Whitney U on per-interval values (Kayenta's):
the gate's number is a pooled statistic of the window (p50 of every TPOT observation, aborted /
requests), the bootstrap bounds exactly that number for quantiles, means and rates alike, while
Hodges-Lehmann bounds a shift between per-interval values, which are coarse (p50s of ~20
observations in wide buckets) or mostly zeros (a handful of aborts). The interval is the finest
unit the data has and keeps a minute's traffic mix together. Seeded by the gate's text: one window
gives one readout. Limits: intervals are taken as independent, and a percentile interval from ~30
intervals covers a little under 95 %; `MIN_INTERVALS` keeps it away from the smallest windows.

Against the bound: the interval wholly inside -> PASS, wholly outside -> FAIL, straddling it ->
INCONCLUSIVE; INCONCLUSIVE also with fewer than `min_samples` observations, fewer than
`MIN_INTERVALS` scrape intervals, or an unknown series (never read as zero). A gauge gate judges the
extreme seen at any scrape (an observed worst case, no interval). The analysis is FAIL if any gate
failed, else INCONCLUSIVE if any gate is, else PASS.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.analysis.metric_defs import GAUGE_MIN_SCRAPES, METRICS, PROMPT_HIST
from orchestrator.analysis.spec import bounds_text, gate_text
from orchestrator.analysis.window import Histogram, Measurement, ReplicaWindow, measure, needs, ratio, value_of

PASS = "pass"
FAIL = "fail"
INCONCLUSIVE = "inconclusive"

#: the interval's coverage, the resamples it is read from, and the fewest scrape intervals a
#: replica's window needs before resampling them says anything
CONFIDENCE = 0.95
RESAMPLES = 1000
MIN_INTERVALS = 10


@dataclass(frozen=True)
class GateResult:
    text: str  # the gate as the runbook says it: "tpot_p50 r2/r1 <= 0.9"
    metric: str
    replicas: tuple[str, ...]  # (candidate, control) of a ratio; (replica,) of a bound
    observed: float | None  # the ratio, or the value
    verdict: str
    why: str
    bound: str = ""  # "<= 0.9", "within [0.5, 0.9]"
    #: the 95 % interval of `observed` (None: a gauge's observed extreme, or nothing judged)
    interval: tuple[float, float] | None = None


def _check(value: float, lo: float | None, hi: float | None) -> bool:
    return (lo is None or value >= lo) and (hi is None or value <= hi)


def classify(interval: tuple[float, float], lo: float | None, hi: float | None) -> str:
    """PASS when the whole interval meets the bound, FAIL when none of it does, else INCONCLUSIVE."""
    a, b = interval
    if (hi is not None and a > hi) or (lo is not None and b < lo):
        return FAIL
    if _check(a, lo, hi) and _check(b, lo, hi):
        return PASS
    return INCONCLUSIVE


def _short_of(m: Measurement, w: ReplicaWindow | None, replica: str, metric: str, min_samples: int) -> str | None:
    if m.absent is not None:
        if m.partial:
            return (f"{replica}'s /metrics carried {m.absent} in only part of the window (first seen mid-window, "
                    f"or gone): its increase is unknown, not zero")
        return (f"{replica}'s /metrics carries no {m.absent}: unknown, not zero (a build or flag set without it, "
                f"or a relay route not reaching an SGLang engine)")
    if METRICS[metric].kind.startswith("gauge"):
        if m.samples < GAUGE_MIN_SCRAPES or m.value is None:
            return f"{replica}'s {metric} was read {int(m.samples)} times in the window, the gate needs {GAUGE_MIN_SCRAPES}"
        return None
    if m.samples < min_samples or m.value is None:
        return (f"not enough traffic: {replica} served {int(m.samples)} {_unit_of_samples(metric)} in the window, "
                f"the gate needs {min_samples}")
    n = len(w.intervals) if w is not None else 0
    if n < MIN_INTERVALS:
        return (f"{replica}'s window holds {n} scrape intervals, an interval estimate needs {MIN_INTERVALS} "
                f"(a longer window or a shorter poll)")
    return None


def _unit_of_samples(metric: str) -> str:
    d = METRICS[metric]
    if d.kind.startswith("gauge"):
        return "scrapes"
    if d.source == PROMPT_HIST:
        return "prompts"
    if d.kind == "http_5xx_rate":
        return "responses"
    return f"{metric.split('_')[0].upper()} observations" if d.hist else "requests"


class _Resampler:
    """One replica's intervals as flat vectors of the series a metric needs, resampled and summed."""

    def __init__(self, metric: str, w: ReplicaWindow) -> None:
        self.d = METRICS[metric]
        self.names = needs(self.d)
        self.hist = self.d.hist
        self.layout = w.histograms[self.names[0]].layout() if self.hist else ()
        self.vecs: list[tuple[float, ...]] = []
        for iv in w.intervals:
            if self.hist:
                h = iv.histograms[self.names[0]]
                self.vecs.append((*(c for _, c in h.buckets), h.count, h.sum))
            else:
                self.vecs.append(tuple(iv.counters[n] for n in self.names))
        self.seconds = [iv.seconds for iv in w.intervals]

    def draw(self, rng: random.Random) -> float | None:
        idx = rng.choices(range(len(self.vecs)), k=len(self.vecs))
        tot = [sum(col) for col in zip(*(self.vecs[i] for i in idx))]
        seconds = sum(self.seconds[i] for i in idx)
        if self.hist:
            h = Histogram(tuple(zip(self.layout, tot[:-2])), tot[-2], tot[-1])
            return value_of(self.d, {}, {self.names[0]: h}, seconds)[0]
        return value_of(self.d, dict(zip(self.names, tot)), {}, seconds)[0]


def _percentiles(values: list[float]) -> tuple[float, float]:
    values = sorted(values)
    tail = (1.0 - CONFIDENCE) / 2
    return values[int(tail * (len(values) - 1))], values[int(math.ceil((1.0 - tail) * (len(values) - 1)))]


def bootstrap(text: str, metric: str, windows: Sequence[ReplicaWindow]) -> tuple[float, float] | None:
    """The 95 % interval of the metric (one window) or of the ratio of the first window's metric to
    the second's; None when too many resamples hold no observation at all (the traffic sits in a
    few intervals). Seeded by `text` (the gate): deterministic for a given input."""
    rng = random.Random(f"orchestrator-judge:{text}")
    rs = [_Resampler(metric, w) for w in windows]
    out: list[float] = []
    for _ in range(RESAMPLES):
        vals = [v for v in [r.draw(rng) for r in rs] if v is not None]
        if len(vals) == len(rs):
            out.append(ratio(vals[0], vals[1]) if len(vals) == 2 else vals[0])
    if len(out) < RESAMPLES * CONFIDENCE:
        return None
    return _percentiles(out)


def _fmt(metric: str, v: float, n: int) -> str:
    return _num(v) if n == 2 else fmt_value(metric, v)


def _span(metric: str, interval: tuple[float, float], n: int) -> str:
    return f"[{_fmt(metric, interval[0], n)}, {_fmt(metric, interval[1], n)}]"


def judge_gate(metric: str, replicas: tuple[str, ...], lo: float | None, hi: float | None,
               windows: Mapping[str, ReplicaWindow], min_samples: int) -> GateResult:
    """A ratio (two replicas: candidate, control) or a bound (one replica), judged."""
    text = gate_text(metric, replicas, lo, hi)
    bound = bounds_text(lo, hi)
    ws = [windows.get(r) for r in replicas]
    ms = [measure(metric, w) if w is not None else Measurement(None, 0.0) for w in ws]
    short = [s for s in (_short_of(m, w, r, metric, min_samples) for m, w, r in zip(ms, ws, replicas)) if s]
    if short:
        return GateResult(text, metric, replicas, None, INCONCLUSIVE, "; ".join(short), bound)
    values = [m.value for m in ms if m.value is not None]
    known = [w for w in ws if w is not None]
    assert len(values) == len(known) == len(replicas)
    two = len(replicas) == 2
    point = ratio(values[0], values[1]) if two else values[0]
    what = f"{replicas[0]}/{replicas[1]}" if two else f"{replicas[0]} {metric}"
    shown = _fmt(metric, point, len(replicas))
    if METRICS[metric].kind.startswith("gauge"):  # observed extremes: judged as seen
        good = _check(point, lo, hi)
        return GateResult(text, metric, replicas, point, PASS if good else FAIL,
                          f"{what} = {shown}" + (" (extremes seen at a scrape)" if two else "")
                          + ("" if good else f", not {bound}"), bound)
    interval = bootstrap(text, metric, known)
    if interval is None:
        return GateResult(text, metric, replicas, point, INCONCLUSIVE,
                          f"{what} = {shown}, but its observations sit in too few scrape intervals to bound it", bound)
    verdict = classify(interval, lo, hi)
    span = f"95 % interval {_span(metric, interval, len(replicas))}"
    tail = {PASS: f"inside {bound}", FAIL: f"wholly outside {bound}",
            INCONCLUSIVE: f"straddles {bound}: the window cannot tell (more traffic or a longer window might)"}[verdict]
    return GateResult(text, metric, replicas, point, verdict, f"{what} = {shown}, {span}, {tail}", bound, interval)


def overall(results: Sequence[GateResult]) -> str:
    verdicts = {r.verdict for r in results}
    if FAIL in verdicts:
        return FAIL
    if INCONCLUSIVE in verdicts or not results:
        return INCONCLUSIVE
    return PASS


def _num(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.3g}"


#: how a value is shown, by its metric's unit
_SHOWN = {"s": lambda v: f"{v * 1000:.1f} ms" if v < 1 else f"{v:.2f} s", "share": lambda v: f"{v * 100:.2f} %",
          "GB": "{:.1f} GB".format, "requests": "{:g}".format, "tokens": "{:.0f} tokens".format, "per_s": "{:.3g}/s".format}


def fmt_value(metric: str, v: float | None) -> str:
    return "-" if v is None else _SHOWN[METRICS[metric].unit](v)


def readout(results: Sequence[GateResult], windows: Mapping[str, ReplicaWindow], replicas: Sequence[str],
            window_s: float) -> str:
    """The table an on-call reads in ten seconds: one row per gate, each replica's value (and its
    samples), the observed ratio or value with its 95 % interval, the bound, the gate's verdict;
    the overall verdict first, and why for every gate that did not pass."""
    verdict = overall(results)
    head = ["metric", *replicas, "observed [95 % interval]", "bound", "verdict"]
    rows: list[list[str]] = []
    for g in results:
        vals = []
        for r in replicas:
            m = measure(g.metric, windows[r]) if r in windows else Measurement(None, 0)
            vals.append("unknown" if m.absent else f"{fmt_value(g.metric, m.value)} (n={int(m.samples)})")
        obs = "-"
        if g.observed is not None:
            obs = f"{'/'.join(g.replicas)} {_fmt(g.metric, g.observed, len(g.replicas))}"
            obs += f" {_span(g.metric, g.interval, len(g.replicas))}" if g.interval is not None else ""
        rows.append([g.metric, *vals, obs, g.bound, g.verdict.upper()])
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    restarts = [f"{r} restarted {windows[r].resets}x" for r in replicas if r in windows and windows[r].resets]
    title = (f"canary readout: {verdict.upper()} over {int(window_s // 60)} min"
             + "".join(f", {r}: {windows[r].scrapes} scrapes" for r in replicas if r in windows)
             + (f" ({'; '.join(restarts)} inside the window: counters taken across the reset)" if restarts else ""))
    out = [title, line(head), line(["-" * w for w in widths]), *[line(r) for r in rows]]
    out += [f"  {g.verdict.upper()}: {g.text}: {g.why}" for g in results if g.verdict != PASS]
    return "\n".join(out)
