"""Samples from a Prometheus-compatible query API (`prometheus_url` in the inventory): the SGLang
series the relay's /metrics carries, one instant vector per replica
(`{__name__=~"sglang:...|...", replica="r2", job="sglang"}`), summed per series name (and per `le`)
into a `Scrape`, so the window arithmetic stays the relay's: the API is a source of cumulative
values, never of quantiles.

No I/O here (the HTTP is orchestrator/hosts/clients/prometheus.py). An unusable answer raises
`PrometheusUnreadable`; the caller counts it, like the client's `PrometheusUnreachable`, as a
missed scrape, never a pass. An empty vector is a scrape without the series.

The `query:` gate's answers (any PromQL, instant or range) are read by `parse_query_answer` and
judged by `judge_query`: an empty answer or a NaN fails.
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


#: every series name a replica's query reads, as a regex alternation
_HIST_SERIES = {f"{h}{suffix}" for h in HISTOGRAMS for suffix in ("_bucket", "_count", "_sum")}
_SERIES = "|".join(re.escape(n) for n in sorted({*COUNTERS, *GAUGES, *_HIST_SERIES}))


def _quote(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"')


def replica_query(replica: str, replica_label: str = "replica", selector: str = "", matchers: str | None = None) -> str:
    """The selector of one replica's series: `replica_label="<replica>"` or the replica's own
    `matchers`, `selector` ANDed in."""
    own = matchers if matchers is not None else f'{replica_label}="{_quote(replica)}"'
    extra = f", {selector}" if selector else ""
    return f'{{__name__=~"{_SERIES}", {own}{extra}}}'


def parse_vector(answer: Any, at: float) -> Scrape:
    """A Scrape from the JSON of `/api/v1/query` (an instant vector), else `PrometheusUnreadable`."""
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
    """One instant read of `replica`'s series through `client` (`PrometheusQueryClient`), stamped `at`."""
    status, text = await client.query(replica_query(replica, replica_label, selector, matchers))
    return parse_vector(_answer(status, text), at)


def _answer(status: int, text: str, no_error: str = "") -> Any:
    """The JSON of an answer of the query API, else `PrometheusUnreadable`: not JSON, an HTTP error,
    or (`no_error` given: what the message then says) no `status: success`."""
    try:
        answer = json.loads(text)
    except ValueError:
        raise PrometheusUnreadable(f"the query API answered HTTP {status} without JSON") from None
    if status != 200 or (no_error and (not isinstance(answer, dict) or answer.get("status") != "success")):
        err = answer.get("error") if isinstance(answer, dict) else None
        raise PrometheusUnreadable(f"the query API answered HTTP {status}" + (f": {str(err)[:200]}" if err else no_error))
    return answer


@dataclass(frozen=True)
class QuerySeries:
    """One series of a query's answer: its labels and values (every point of a range query)."""

    labels: dict[str, str]
    values: list[float]

    def name(self) -> str:
        """`name{label="value", ...}` as PromQL writes a series."""
        labels = {k: v for k, v in self.labels.items() if k != "__name__"}
        inner = ", ".join(f'{k}="{_quote(v)}"' for k, v in sorted(labels.items()))
        return f"{self.labels.get('__name__', '')}{{{inner}}}"


def _value(pair: Any) -> float:
    _, raw = pair
    return float(raw)


def parse_query_answer(status: int, text: str) -> list[QuerySeries]:
    """The series of one answer of `/api/v1/query(_range)`: a vector, matrix or scalar, else
    `PrometheusUnreadable`."""
    data = _answer(status, text, " without status: success").get("data")
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
    """What is wrong with a query's answer under [low, high]: "no data" (an absent series proves
    nothing), each series with a NaN or a value outside the bounds (its worst value named)."""
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
