"""Samples from a Prometheus-compatible query API (Prometheus, Thanos, VictoriaMetrics, Mimir) when
the inventory names one for the host (`prometheus_url`): the same SGLang series the relay's /metrics
carries, read as an instant vector per replica with one `GET /api/v1/query`:

    {__name__=~"sglang:num_requests_total|...|sglang:inter_token_latency_seconds_bucket|...",
     replica="r2", job="sglang"}

The answer's samples are summed per series name (and per `le` for histogram buckets) into a
`Scrape`, so the window arithmetic (bucket deltas, counter resets, quantiles) is the relay's,
untouched: the API is a source of cumulative values, not a place where quantiles are computed.

An answer that is not `status: success` with a `vector` raises `PrometheusUnreadable`; a timeout
or a transport error is the client's `PrometheusUnreachable` (orchestrator/hosts/clients/
prometheus.py, which does the HTTP: this module does no I/O). Either is "could not be read": the
caller counts it as a missed scrape, never as a pass. An empty vector is a scrape without the series (the gate says the series is absent).

The `query:` gate's answers (any PromQL, instant or range) are read by `parse_query_answer` into
`QuerySeries` and judged by `judge_query`: every value within the bounds, an empty answer "no data"
(a failure), a NaN a value that is not a number (a failure).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from orchestrator.analysis.window import Scrape
from orchestrator.metricproviders.relay_scrape import COUNTERS, GAUGES, HISTOGRAMS, Sums


class PrometheusUnreadable(RuntimeError):
    """The query API gave no usable answer (transport error, timeout, error status, wrong shape)."""


def series_names() -> list[str]:
    """Every series name the analysis reads, sorted (the `__name__` alternation)."""
    hist = [f"{h}{suffix}" for h in HISTOGRAMS for suffix in ("_bucket", "_count", "_sum")]
    return sorted({*COUNTERS, *GAUGES, *hist})


def _quote(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"')


def replica_query(replica: str, replica_label: str = "replica", selector: str = "", matchers: str | None = None) -> str:
    """The instant-vector selector of one replica's series: by `replica_label="<replica>"`, or by
    the replica's own `matchers` (a per-replica selector); `selector` ANDed in either way."""
    names = "|".join(re.escape(n) for n in series_names())
    own = matchers if matchers is not None else f'{replica_label}="{_quote(replica)}"'
    extra = f", {selector}" if selector else ""
    return f'{{__name__=~"{names}", {own}{extra}}}'


def parse_vector(answer: Any, at: float) -> Scrape:
    """A Scrape from the JSON of `/api/v1/query` (an instant vector). Raises `PrometheusUnreadable`
    on an error answer or a shape that is not a vector of `[time, "value"]` samples."""
    if not isinstance(answer, dict) or answer.get("status") != "success":
        err = answer.get("error") if isinstance(answer, dict) else None
        raise PrometheusUnreadable(f"the query API answered {err or 'without status: success'}")
    data = answer.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        raise PrometheusUnreadable("the query API's answer is not an instant vector")
    sums = Sums()
    try:
        for item in data["result"]:
            labels, (_, raw) = item["metric"], item["value"]
            name, value = labels["__name__"], float(raw)
            if not math.isnan(value):  # NaN: a stale marker, the series is gone at this instant
                sums.add(name, labels, value)
    except (KeyError, TypeError, ValueError) as exc:
        raise PrometheusUnreadable(f"a sample of the query API's vector is malformed: {type(exc).__name__}: {exc}") from None
    return sums.scrape(at, lambda name: PrometheusUnreadable(f"histogram {name} has no +Inf bucket in the query API's answer"))


async def read_replica(client: Any, replica: str, at: float, *, replica_label: str = "replica",
                       selector: str = "", matchers: str | None = None) -> Scrape:
    """One instant read of `replica`'s series through `client` (its `query(promql)` answers
    `(status, text)`: orchestrator/hosts/clients/prometheus.py), stamped `at` (the run clock).
    Raises what the client raises (unreachable) or `PrometheusUnreadable` (an unusable answer)."""
    status, text = await client.query(replica_query(replica, replica_label, selector, matchers))
    return parse_answer(status, text, at)


def parse_answer(status: int, text: str, at: float) -> Scrape:
    """A Scrape from one HTTP answer of `/api/v1/query`; anything but a 200 vector: `PrometheusUnreadable`."""
    try:
        answer = json.loads(text)
    except ValueError:
        raise PrometheusUnreadable(f"the query API answered HTTP {status} without JSON") from None
    if status != 200:
        err = answer.get("error") if isinstance(answer, dict) else None
        raise PrometheusUnreadable(f"the query API answered HTTP {status}" + (f": {str(err)[:200]}" if err else ""))
    return parse_vector(answer, at)


@dataclass(frozen=True)
class QuerySeries:
    """One series of a query's answer: its labels and its values (one for an instant vector or a
    scalar, every point of a range query's matrix)."""

    labels: dict[str, str]
    values: list[float]

    def name(self) -> str:
        """`name{label="value", ...}` as PromQL writes a series (`{}` for an aggregate without labels)."""
        labels = {k: v for k, v in self.labels.items() if k != "__name__"}
        inner = ", ".join(f'{k}="{_quote(v)}"' for k, v in sorted(labels.items()))
        return f"{self.labels.get('__name__', '')}{{{inner}}}"


def _value(pair: Any) -> float:
    _, raw = pair
    return float(raw)


def parse_query_answer(status: int, text: str) -> list[QuerySeries]:
    """The series of one HTTP answer of `/api/v1/query` or `/api/v1/query_range` (resultType vector,
    matrix or scalar). Anything but a 200 `status: success` with one of those: `PrometheusUnreadable`."""
    try:
        answer = json.loads(text)
    except ValueError:
        raise PrometheusUnreadable(f"the query API answered HTTP {status} without JSON") from None
    if status != 200 or not isinstance(answer, dict) or answer.get("status") != "success":
        err = answer.get("error") if isinstance(answer, dict) else None
        raise PrometheusUnreadable(f"the query API answered HTTP {status}" + (f": {str(err)[:200]}" if err else
                                                                              " without status: success"))
    data = answer.get("data")
    kind = data.get("resultType") if isinstance(data, dict) else None
    result = data.get("result") if isinstance(data, dict) else None
    try:
        if kind == "scalar":
            return [QuerySeries({}, [_value(result)])]
        if kind == "vector" and isinstance(result, list):
            return [QuerySeries(dict(item["metric"]), [_value(item["value"])]) for item in result]
        if kind == "matrix" and isinstance(result, list):
            return [QuerySeries(dict(item["metric"]), [_value(p) for p in item["values"]]) for item in result]
    except (KeyError, TypeError, ValueError) as exc:
        raise PrometheusUnreadable(f"a sample of the query API's {kind} is malformed: {type(exc).__name__}: {exc}") from None
    raise PrometheusUnreadable(f"the query API's answer is not a vector, a matrix or a scalar ({kind or 'no resultType'})")


def judge_query(series: list[QuerySeries], low: float | None, high: float | None, fmt: Any = str) -> list[str]:
    """What is wrong with a query's answer under [low, high]: "no data" for an empty answer (a
    series that is not there proves nothing), each series with a value outside the bounds or not a
    number (its worst value named). `fmt` formats a number."""
    if not series or all(not s.values for s in series):
        return ["no data: the query answered no series (an absent series is never a pass)"]
    problems = []
    for s in series:
        if not s.values:
            continue
        if any(math.isnan(v) for v in s.values):
            problems.append(f"{s.name()} is NaN (not a number)")
            continue
        if low is not None and min(s.values) < low:
            problems.append(f"{s.name()} = {fmt(min(s.values))}, below {fmt(low)}")
        elif high is not None and max(s.values) > high:
            problems.append(f"{s.name()} = {fmt(max(s.values))}, above {fmt(high)}")
    return problems
