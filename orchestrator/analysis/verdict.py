"""Gates over windows, and the readout: candidate vs control per metric, with the verdict.

Pure. Three verdicts, never two: PASS, FAIL, and NOT ENOUGH TRAFFIC (a gate whose replicas did
not serve `min_samples` observations of its metric in the window). The analysis' verdict is FAIL
if any gate failed (a breach seen on enough traffic is a breach, whatever the other gates say),
else NOT ENOUGH TRAFFIC if any gate lacked traffic (an unjudged gate is not a passed one), else
PASS.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.analysis.window import GAUGE_MIN_SCRAPES, METRICS, Measurement, ReplicaWindow, measure, ratio

PASS = "pass"
FAIL = "fail"
NO_TRAFFIC = "not enough traffic"


@dataclass(frozen=True)
class GateResult:
    text: str  # the gate as the runbook says it: "tpot_p50 r2/r1 <= 0.9"
    metric: str
    replicas: tuple[str, ...]  # (candidate, control) of a ratio; (replica,) of a bound
    observed: float | None  # the ratio, or the value
    verdict: str
    why: str
    bound: str = ""  # "<= 0.9", "within [0.5, 0.9]"


def _bounds(lo: float | None, hi: float | None) -> str:
    if lo is not None and hi is not None:
        return f"within [{lo:g}, {hi:g}]"
    return f">= {lo:g}" if lo is not None else f"<= {hi:g}"


def _check(value: float, lo: float | None, hi: float | None) -> bool:
    return (lo is None or value >= lo) and (hi is None or value <= hi)


def _short_of(m: Measurement, replica: str, metric: str, min_samples: int) -> str | None:
    if m.absent is not None:
        return f"{replica}'s /metrics carries no {m.absent} (is the relay route reaching an SGLang engine?)"
    if METRICS[metric].kind.startswith("gauge"):
        if m.samples < GAUGE_MIN_SCRAPES or m.value is None:
            return f"{replica}'s {metric} was read {int(m.samples)} times in the window, the gate needs {GAUGE_MIN_SCRAPES}"
        return None
    if m.samples < min_samples or m.value is None:
        return f"{replica} served {int(m.samples)} {_unit_of_samples(metric)} in the window, the gate needs {min_samples}"
    return None


def _unit_of_samples(metric: str) -> str:
    if METRICS[metric].kind.startswith("gauge"):
        return "scrapes"
    return "requests" if METRICS[metric].kind != "quantile" else f"{metric.split('_')[0].upper()} observations"


def ratio_gate(metric: str, candidate: str, control: str, lo: float | None, hi: float | None,
               windows: Mapping[str, ReplicaWindow], min_samples: int) -> GateResult:
    text = f"{metric} {candidate}/{control} {_bounds(lo, hi)}"
    cand, ctrl = measure(metric, windows[candidate]), measure(metric, windows[control])
    short = [s for s in (_short_of(cand, candidate, metric, min_samples), _short_of(ctrl, control, metric, min_samples)) if s]
    if short:
        return GateResult(text, metric, (candidate, control), None, NO_TRAFFIC, "; ".join(short), _bounds(lo, hi))
    assert cand.value is not None and ctrl.value is not None
    r = ratio(cand.value, ctrl.value)
    good = _check(r, lo, hi)
    return GateResult(text, metric, (candidate, control), r, PASS if good else FAIL,
                      f"{candidate}/{control} = {_num(r)}" + ("" if good else f", not {_bounds(lo, hi)}"), _bounds(lo, hi))


def bound_gate(metric: str, replica: str, lo: float | None, hi: float | None,
               windows: Mapping[str, ReplicaWindow], min_samples: int) -> GateResult:
    text = f"{metric} of {replica} {_bounds(lo, hi)}"
    m = measure(metric, windows[replica])
    short = _short_of(m, replica, metric, min_samples)
    if short:
        return GateResult(text, metric, (replica,), None, NO_TRAFFIC, short, _bounds(lo, hi))
    assert m.value is not None
    good = _check(m.value, lo, hi)
    return GateResult(text, metric, (replica,), m.value, PASS if good else FAIL,
                      f"{replica} {metric} = {fmt_value(metric, m.value)}" + ("" if good else f", not {_bounds(lo, hi)}"),
                      _bounds(lo, hi))


def overall(results: Sequence[GateResult]) -> str:
    verdicts = {r.verdict for r in results}
    if FAIL in verdicts:
        return FAIL
    if NO_TRAFFIC in verdicts or not results:
        return NO_TRAFFIC
    return PASS


def _num(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.3g}"


def fmt_value(metric: str, v: float | None) -> str:
    if v is None:
        return "-"
    unit = METRICS[metric].unit
    if unit == "s":
        return f"{v * 1000:.1f} ms" if v < 1 else f"{v:.2f} s"
    if unit == "share":
        return f"{v * 100:.2f} %"
    if unit == "GB":
        return f"{v:.1f} GB"
    if unit == "requests":
        return f"{v:g}"
    return f"{v:.3g}/s"


def readout(results: Sequence[GateResult], windows: Mapping[str, ReplicaWindow], replicas: Sequence[str],
            window_s: float) -> str:
    """The table an on-call reads in ten seconds: one row per gate, each replica's value (and its
    samples), the observed ratio or value, the bound, the gate's verdict; the overall verdict first."""
    verdict = overall(results)
    head = ["metric", *[f"{r}" for r in replicas], "observed", "bound", "verdict"]
    rows: list[list[str]] = []
    for g in results:
        vals = []
        for r in replicas:
            m = measure(g.metric, windows[r]) if r in windows else Measurement(None, 0)
            vals.append(f"{fmt_value(g.metric, m.value)} (n={int(m.samples)})")
        if g.observed is None:
            obs = "-"
        elif len(g.replicas) == 2:
            obs = f"{g.replicas[0]}/{g.replicas[1]} {_num(g.observed)}"
        else:
            obs = f"{g.replicas[0]} {fmt_value(g.metric, g.observed)}"
        bound = f"{g.replicas[0]}/{g.replicas[1]} {g.bound}" if len(g.replicas) == 2 else f"{g.replicas[0]} {g.bound}"
        rows.append([g.metric, *vals, obs, bound, g.verdict.upper()])
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
