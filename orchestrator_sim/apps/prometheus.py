"""A loopback fake of a Prometheus-compatible query API over one simulated host's exporters:
`GET /api/v1/query` (an instant vector) and `GET /api/v1/query_range` (a matrix).

What it holds, labelled as the hosts' scrape configs label them, for every host of the simulated
fleet (one query API behind every host's `prometheus_url`, as a central Prometheus holds every
host's collector's series; a fleet of gpu02 alone holds gpu02's):
- each ready engine's /metrics samples with the collector's `host="<host>"` and
  `container_name="<service>"`, and the simulator's `replica="r1"|"r2"` (the service's suffix) and
  `job="sglang"` (what the analysis' `source: prometheus` reads by default; per-replica matchers
  pick an engine by host and container name);
- DCGM's exporter while its container runs (`job="dcgm-dcgm-glm53"`, `container_name="dcgm-glm53"`,
  `host="<host>"`, as the compose file's otelcol job labels it): per GPU `DCGM_FI_DEV_FB_FREE`,
  `DCGM_FI_DEV_FB_USED`, `DCGM_FI_DEV_XID_ERRORS`;
- a node exporter (`job="node-exporter"`, `host="<host>"`, `instance="<host>:9100"`; ASSUMED: the
  compose files carry no node-exporter job): `node_filesystem_avail_bytes` and
  `node_filesystem_size_bytes` of `/` and of `/var/lib/docker`, the filesystem docker's named
  volumes (the model cache `huggingface_cache`) live on, with 384 GiB free (what the perception
  check logs).

PromQL understood: a vector selector (`name`, `name{matchers}`, `{matchers}`), optionally inside
one aggregation `sum|min|max|avg|count [by|without (labels)] (...)`. Anything else is Prometheus'
400 bad_data, naming the simulator's limit. A range query repeats each series' current value at
every step (the simulated exporters keep no history). The `prometheus-down` fault answers 503.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from orchestrator_sim.host.sim_host import SimHost

_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_SELECTOR = re.compile(r"^\s*([A-Za-z_:][A-Za-z0-9_:]*)?\s*(?:\{(.*)\})?\s*$", re.S)
_AGGREGATION = re.compile(r"^\s*(sum|min|max|avg|count)\s*(?:(by|without)\s*\(([^()]*)\)\s*)?\((.*?)\)\s*"
                          r"(?:(by|without)\s*\(([^()]*)\))?\s*$", re.S)
#: Prometheus refuses a range query with more points per series than this
MAX_POINTS = 11_000
#: the node exporter's filesystems: mountpoint -> (device, size, available) bytes
FILESYSTEMS = {"/": ("/dev/nvme0n1p2", 1_888_195_907_584, 1_201_021_591_552),
               "/var/lib/docker": ("/dev/md0", 7_681_491_271_680, 412_316_860_416)}

Series = tuple[dict[str, str], float]


class BadQuery(ValueError):
    pass


def parse_selector(query: str) -> list[tuple[str, str, str]] | None:
    """[(label, op, value)] of a vector selector (`name{...}`, `{...}` or `name`; the name a
    `__name__` matcher), or None if the query is anything else."""
    m = _SELECTOR.match(query)
    if m is None or (m.group(1) is None and m.group(2) is None):
        return None
    out = [("__name__", "=", m.group(1))] if m.group(1) else []
    body, pos = m.group(2) or "", 0
    while pos < len(body):
        mm = _MATCHER.match(body, pos)
        if mm is None:
            return None
        out.append((mm.group(1), mm.group(2), re.sub(r"\\(.)", r"\1", mm.group(3))))
        pos = mm.end()
    return out


def _matches(labels: dict[str, str], matchers: list[tuple[str, str, str]]) -> bool:
    for name, op, value in matchers:
        got = labels.get(name, "")
        if op == "=" and got != value or op == "!=" and got == value:
            return False
        if op == "=~" and not re.fullmatch(value, got) or op == "!~" and re.fullmatch(value, got):
            return False
    return True


def _samples(text: str, extra: dict[str, str]) -> list[Series]:
    from prometheus_client.parser import text_string_to_metric_families

    return [({**s.labels, "__name__": s.name, **extra}, float(s.value))
            for fam in text_string_to_metric_families(text) for s in fam.samples]


def node_text() -> str:
    """The node exporter's filesystem gauges."""
    out = []
    for name, index in (("node_filesystem_avail_bytes", 2), ("node_filesystem_size_bytes", 1)):
        out += [f"# HELP {name} Filesystem space in bytes.", f"# TYPE {name} gauge"]
        out += [f'{name}{{device="{fs[0]}",fstype="ext4",mountpoint="{mp}"}} {fs[index]}' for mp, fs in FILESYSTEMS.items()]
    return "\n".join(out) + "\n"


def host_series(host: SimHost) -> list[Series]:
    """Every series the host's scrape targets expose now."""
    out: list[Series] = []
    for service, text in sorted(host.prometheus_texts().items()):
        out += _samples(text, {"replica": service.rsplit("-", 1)[-1], "job": "sglang", "host": host.name,
                               "container_name": service})
    dcgm = host.dcgm_exporter_text()
    if dcgm is not None:
        out += _samples(dcgm, {"job": "dcgm-dcgm-glm53", "service": "dcgm-exporter", "container_name": "dcgm-glm53",
                               "host": host.name})
    out += _samples(node_text(), {"job": "node-exporter", "host": host.name, "instance": f"{host.name}:9100"})
    return out


_AGGREGATE: dict[str, Callable[[list[float]], float]] = {
    "sum": sum, "min": min, "max": max, "count": lambda v: float(len(v)), "avg": lambda v: sum(v) / len(v)}


def evaluate(query: str, series: list[Series]) -> list[Series]:
    """The instant vector of `query` over `series` (the subset of PromQL the module doc names)."""
    agg = _AGGREGATION.match(query)
    inner = agg.group(4) if agg else query
    matchers = parse_selector(inner)
    if matchers is None:
        raise BadQuery(f"the simulated query API understands a selector, optionally in one sum/min/max/avg/count, not {query!r}")
    try:
        if all(_matches({}, [m]) for m in matchers):  # every matcher matches an absent label: it selects everything
            raise BadQuery("vector selector must contain at least one non-empty matcher")
        picked = [(labels, value) for labels, value in series if _matches(labels, matchers)]
    except re.error as exc:
        raise BadQuery(f"invalid regular expression: {exc}") from None
    if agg is None:
        return picked
    how, names = (agg.group(2), agg.group(3)) if agg.group(2) else (agg.group(5), agg.group(6))
    keys = [n.strip() for n in (names or "").split(",") if n.strip()]
    groups: dict[tuple[tuple[str, str], ...], list[float]] = {}
    for labels, value in picked:
        if how == "without":
            kept = {k: v for k, v in labels.items() if k not in keys and k != "__name__"}
        else:
            kept = {k: labels[k] for k in keys if k in labels}
        groups.setdefault(tuple(sorted(kept.items())), []).append(value)
    return [(dict(k), _AGGREGATE[agg.group(1)](v)) for k, v in sorted(groups.items())]


def _error(status: int, kind: str, text: str) -> JSONResponse:
    return JSONResponse({"status": "error", "errorType": kind, "error": text}, status_code=status)


def _float(request: Request, name: str) -> float:
    try:
        return float(request.query_params[name])
    except (KeyError, ValueError):
        raise BadQuery(f"invalid parameter {name!r}: cannot parse {request.query_params.get(name, '')!r} to a valid "
                       f"timestamp or duration") from None


def build_prometheus_app(host: SimHost, fleet: Callable[[], Iterable[SimHost]] | None = None) -> Starlette:
    """The query API behind `host`'s `prometheus_url`, holding the series of every host `fleet()`
    gives (default: `host` alone). The `prometheus-down` fault of `host` takes it down."""

    def series() -> list[Series]:
        return [s for h in (fleet() if fleet is not None else [host]) for s in host_series(h)]

    async def query(request: Request) -> Response:
        if host.faults.active("prometheus-down"):
            return _error(503, "unavailable", "the query API is down (simulated fault prometheus-down)")
        try:
            found = evaluate(request.query_params.get("query", ""), series())
        except BadQuery as exc:
            return _error(400, "bad_data", str(exc))
        now = time.time()
        result = [{"metric": labels, "value": [now, repr(value)]} for labels, value in found]
        return JSONResponse({"status": "success", "data": {"resultType": "vector", "result": result}})

    async def query_range(request: Request) -> Response:
        if host.faults.active("prometheus-down"):
            return _error(503, "unavailable", "the query API is down (simulated fault prometheus-down)")
        try:
            start, end, step = _float(request, "start"), _float(request, "end"), _float(request, "step")
            if end < start:
                raise BadQuery("end timestamp must not be before start time")
            if step <= 0:
                raise BadQuery("zero or negative query resolution step widths are not accepted. Try a positive integer")
            if (end - start) / step > MAX_POINTS:
                raise BadQuery(f"exceeded maximum resolution of {MAX_POINTS:,} points per timeseries. Try decreasing the "
                               f"query resolution (?step=XX)")
            found = evaluate(request.query_params.get("query", ""), series())
        except BadQuery as exc:
            return _error(400, "bad_data", str(exc))
        points = [start + i * step for i in range(int((end - start) / step) + 1)]
        result = [{"metric": labels, "values": [[t, repr(value)] for t in points]} for labels, value in found]
        return JSONResponse({"status": "success", "data": {"resultType": "matrix", "result": result}})

    return Starlette(routes=[Route("/api/v1/query", query, methods=["GET", "POST"]),
                             Route("/api/v1/query_range", query_range, methods=["GET", "POST"])])
