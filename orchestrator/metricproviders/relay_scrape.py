"""Samples from each replica's own /metrics through the soak relay's per-replica routes (`:8008`
r1, `:8009` r2 on gpu02), parsed into a `Scrape`. `parse_scrape` is pure; `read_scrape` fetches
through the executor's relay client (`rt`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from prometheus_client.parser import text_string_to_metric_families

from orchestrator.analysis.metric_defs import (
    GENERATION_ENDPOINTS,
    HTTP_5XX,
    HTTP_RESPONSES,
    HTTP_SERVED,
    METRICS,
    REQUESTS,
)
from orchestrator.analysis.window import Histogram, Scrape
from orchestrator.metricproviders.metrics_text import MetricsTextError

if TYPE_CHECKING:
    from orchestrator.engine.steps.activities import Activities

#: the histograms and counters any analysis metric reads (others in the text are ignored)
HISTOGRAMS = frozenset(d.source for d in METRICS.values() if d.hist)
COUNTERS = frozenset({REQUESTS, *(d.source for d in METRICS.values() if not d.hist and not d.kind.startswith("gauge"))})
#: the engine's own gauges a metric reads (summed over label sets); DCGM's are metricproviders/dcgm.py's
GAUGES = frozenset(d.source for d in METRICS.values() if d.kind.startswith("gauge") and d.origin == "engine")


class Sums:
    """Samples summed over label sets (histogram buckets per `le`)."""

    def __init__(self) -> None:
        self.counters: dict[str, float] = {}
        self.gauges: dict[str, float] = {}
        self.buckets: dict[str, dict[float, float]] = {}
        self.counts: dict[str, float] = {}
        self.sums: dict[str, float] = {}
        #: HTTP_RESPONSES read as its two counters of the generation endpoints (metric_defs.py)
        self.http = {HTTP_SERVED: 0.0, HTTP_5XX: 0.0}

    def add(self, name: str, labels: dict[str, str], value: float, family: str | None = None) -> None:
        """`family`: the sample's histogram when the source names it, else read off the name."""
        if name in GAUGES:
            self.gauges[name] = self.gauges.get(name, 0.0) + value
            return
        if name in COUNTERS:
            self.counters[name] = self.counters.get(name, 0.0) + value
            if name == HTTP_RESPONSES and labels.get("endpoint") in GENERATION_ENDPOINTS:
                self.http[HTTP_SERVED] += value
                status = labels.get("status_code", "")
                if status.startswith("5") and status != "503":
                    self.http[HTTP_5XX] += value
            return
        base, _, suffix = name.rpartition("_")
        if base not in HISTOGRAMS or (family is not None and family != base):
            return
        if suffix == "bucket":
            b = self.buckets.setdefault(base, {})
            le = float(labels["le"])
            b[le] = b.get(le, 0.0) + value
        elif suffix == "count":
            self.counts[base] = self.counts.get(base, 0.0) + value
        elif suffix == "sum":
            self.sums[base] = self.sums.get(base, 0.0) + value

    def scrape(self, at: float, no_inf: Callable[[str], Exception]) -> Scrape:
        """The Scrape; a histogram without a +Inf bucket raises `no_inf(name)`."""
        hists: dict[str, Histogram] = {}
        for name, b in self.buckets.items():
            if not b or not math.isinf(max(b)):
                raise no_inf(name)
            layout = tuple(sorted(b.items()))
            hists[name] = Histogram(layout, self.counts.get(name, layout[-1][1]), self.sums.get(name, 0.0))
        counters = dict(self.counters)
        if counters.pop(HTTP_RESPONSES, None) is not None:
            # the family is exported: a status that has no child yet has answered nothing, 0
            counters.update(self.http)
        return Scrape(at, counters, hists, self.gauges)


def parse_scrape(text: str, at: float) -> Scrape:
    """The wanted counters and histograms of one /metrics text (else `MetricsTextError`). A wanted
    counter the text does not declare is left out (unknown to the judge, never 0)."""
    sums = Sums()
    declared: set[str] = set()
    try:
        for fam in text_string_to_metric_families(text):
            if fam.type == "counter" and not fam.samples:
                declared.add(fam.name + "_total")
            for s in fam.samples:
                sums.add(s.name, s.labels, float(s.value), fam.name)
    except Exception as exc:  # the parser raises ValueError/IndexError/KeyError on bad input
        raise MetricsTextError(f"the /metrics text does not parse: {type(exc).__name__}: {exc}") from None
    # a counter the engine declares (its TYPE line) without a sample is a labelled counter that has
    # no child yet: it has counted nothing, 0. A counter not declared at all stays absent: unknown.
    for name in declared & COUNTERS:
        sums.counters.setdefault(name, 0.0)
    return sums.scrape(at, lambda name: MetricsTextError(f"histogram {name} has no +Inf bucket"))


async def relay_text(rt: Activities, port: int, token_variable: str) -> str:
    """The /metrics text behind relay `port`; raises what the relay client raises (the caller counts misses)."""
    env = await rt.ensure_env()
    client: Any = rt.relay_client(port, env.get(token_variable, ""))
    return await client.metrics_text()


async def read_scrape(rt: Activities, port: int, token_variable: str) -> Scrape:
    """One scrape of the engine behind relay `port`, stamped with the run clock."""
    return parse_scrape(await relay_text(rt, port, token_variable), rt.clock.monotonic())
