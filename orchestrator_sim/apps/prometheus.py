"""A loopback fake of a Prometheus-compatible query API (issue 23's `source: prometheus`): `GET
/api/v1/query?query={...}` answers an instant vector of the host's engines' current /metrics
samples, each labelled `replica="r1"|"r2"` and `job="sglang"` (as a scrape config would), filtered
by the query's label matchers. Only a bare selector `{name op "value", ...}` is understood (what
orchestrator/metricproviders/prometheus_api.py sends); anything else is Prometheus' 400 bad_data.
The `prometheus-down` fault answers 503 (the analysis then counts unread scrapes)."""

from __future__ import annotations

import re
import time
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from orchestrator_sim.host.sim_host import SimHost

_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


def parse_selector(query: str) -> list[tuple[str, str, str]] | None:
    """[(label, op, value)] of a bare `{...}` selector, or None if the query is anything else."""
    q = query.strip()
    if not (q.startswith("{") and q.endswith("}")):
        return None
    body, out, pos = q[1:-1], [], 0
    while pos < len(body):
        m = _MATCHER.match(body, pos)
        if m is None:
            return None
        out.append((m.group(1), m.group(2), re.sub(r"\\(.)", r"\1", m.group(3))))
        pos = m.end()
    return out


def _matches(labels: dict[str, str], matchers: list[tuple[str, str, str]]) -> bool:
    for name, op, value in matchers:
        got = labels.get(name, "")
        if op == "=" and got != value or op == "!=" and got == value:
            return False
        if op == "=~" and not re.fullmatch(value, got) or op == "!~" and re.fullmatch(value, got):
            return False
    return True


def vector(texts: dict[str, str], matchers: list[tuple[str, str, str]], now: float) -> list[dict[str, Any]]:
    from prometheus_client.parser import text_string_to_metric_families

    out = []
    for replica, text in sorted(texts.items()):
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                labels = {**s.labels, "__name__": s.name, "replica": replica, "job": "sglang"}
                if _matches(labels, matchers):
                    out.append({"metric": labels, "value": [now, repr(float(s.value))]})
    return out


def _error(status: int, kind: str, text: str) -> JSONResponse:
    return JSONResponse({"status": "error", "errorType": kind, "error": text}, status_code=status)


def build_prometheus_app(host: SimHost) -> Starlette:
    async def query(request: Request) -> Response:
        if host.faults.active("prometheus-down"):
            return _error(503, "unavailable", "the query API is down (simulated fault prometheus-down)")
        q = request.query_params.get("query", "")
        matchers = parse_selector(q)
        if not matchers:
            return _error(400, "bad_data", f"the simulated query API understands only a label selector, not {q!r}")
        try:
            result = vector(host.prometheus_texts(), matchers, time.time())
        except re.error as exc:
            return _error(400, "bad_data", f"invalid regular expression: {exc}")
        return JSONResponse({"status": "success", "data": {"resultType": "vector", "result": result}})

    return Starlette(routes=[Route("/api/v1/query", query, methods=["GET", "POST"])])
