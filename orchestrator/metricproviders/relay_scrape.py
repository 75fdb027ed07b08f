"""Samples from each replica's own /metrics, read through the soak relay's per-replica routes
(`:8008` r1, `:8009` r2 on gpu02): the engine's Prometheus text, parsed with prometheus_client's
parser into a `Scrape` (the counters and histograms the analysis metrics need).

`parse_scrape` is pure; `read_scrape` fetches through the executor's relay client (`rt`), so this
module imports no HTTP client of its own.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from prometheus_client.parser import text_string_to_metric_families

from orchestrator.analysis.window import METRICS, REQUESTS, Histogram, Scrape
from orchestrator.metricproviders.metrics_text import MetricsTextError

if TYPE_CHECKING:
    from orchestrator.engine.steps.activities import Activities

#: the histograms and counters any analysis metric reads (others in the text are ignored)
HISTOGRAMS = frozenset(d.source for d in METRICS.values() if d.kind == "quantile")
COUNTERS = frozenset({REQUESTS, *(d.source for d in METRICS.values() if d.kind not in ("quantile", "gauge_min", "gauge_max"))})
#: the engine's own gauges a metric reads (summed over label sets); DCGM's are metricproviders/dcgm.py's
GAUGES = frozenset(d.source for d in METRICS.values() if d.kind.startswith("gauge") and d.origin == "engine")


def parse_scrape(text: str, at: float) -> Scrape:
    """The wanted counters (summed over label sets) and histograms (buckets summed per `le` over
    label sets) of one /metrics text. A text the parser refuses: `MetricsTextError`."""
    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    buckets: dict[str, dict[float, float]] = {}
    counts: dict[str, float] = {}
    sums: dict[str, float] = {}
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name in GAUGES:
                    gauges[s.name] = gauges.get(s.name, 0.0) + float(s.value)
                elif s.name in COUNTERS:
                    counters[s.name] = counters.get(s.name, 0.0) + float(s.value)
                elif fam.name in HISTOGRAMS:
                    if s.name == fam.name + "_bucket":
                        le = float(s.labels["le"])
                        b = buckets.setdefault(fam.name, {})
                        b[le] = b.get(le, 0.0) + float(s.value)
                    elif s.name == fam.name + "_count":
                        counts[fam.name] = counts.get(fam.name, 0.0) + float(s.value)
                    elif s.name == fam.name + "_sum":
                        sums[fam.name] = sums.get(fam.name, 0.0) + float(s.value)
    except Exception as exc:  # the parser raises ValueError/IndexError/KeyError on bad input
        raise MetricsTextError(f"the /metrics text does not parse: {type(exc).__name__}: {exc}") from None
    hists: dict[str, Histogram] = {}
    for name, b in buckets.items():
        if not b or not math.isinf(max(b)):
            raise MetricsTextError(f"histogram {name} has no +Inf bucket")
        layout = tuple(sorted(b.items()))
        hists[name] = Histogram(layout, counts.get(name, layout[-1][1]), sums.get(name, 0.0))
    return Scrape(at, counters, hists, gauges)


async def read_scrape(rt: "Activities", port: int, token_variable: str) -> Scrape:
    """One scrape of the engine behind relay `port`, stamped with the run clock. Raises what the
    relay client raises (the caller counts misses) or `MetricsTextError`."""
    env = await rt.ensure_env()
    client: Any = rt.relay_client(port, env.get(token_variable, ""))
    text = await client.metrics_text()
    return parse_scrape(text, rt.clock.monotonic())
