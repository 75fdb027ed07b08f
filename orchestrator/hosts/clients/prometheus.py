"""A Prometheus-compatible query API (`GET <prometheus_url>/api/v1/query`), transport only: the
answer's status and text go to orchestrator/metricproviders/prometheus_api.py. A timeout or a
transport failure is `PrometheusUnreachable` (an unread scrape, never a pass)."""

from __future__ import annotations

import time

import httpx

from orchestrator.hosts.clients.errors import ClientError
from orchestrator.hosts.clients.http_session import shared_context

#: a query that takes longer is a missed scrape (the analysis polls at its own cadence)
TIMEOUT_S = 10.0


class PrometheusUnreachable(ClientError):
    """The query API did not answer (timeout, refused, reset)."""

class PrometheusQueryClient:
    def __init__(self, base_url: str, *, timeout: float = TIMEOUT_S, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.url = base_url.rstrip("/") + "/api/v1/query"
        self.range_url = self.url + "_range"
        self.timeout = timeout
        self._http = httpx.AsyncClient(trust_env=False, transport=transport, verify=shared_context())

    async def query(self, promql: str) -> tuple[int, str]:
        """(HTTP status, body text) of one instant query."""
        return await self._get(self.url, {"query": promql})

    async def query_range(self, promql: str, seconds: float, step: float) -> tuple[int, str]:
        """(HTTP status, body text) of one range query over the `seconds` before now (wall clock:
        Prometheus' timestamps are Unix time)."""
        end = time.time()
        return await self._get(self.range_url, {"query": promql, "start": f"{end - seconds:.3f}", "end": f"{end:.3f}",
                                                "step": f"{step:g}"})

    async def _get(self, url: str, params: dict[str, str]) -> tuple[int, str]:
        try:
            resp = await self._http.get(url, params=params, timeout=self.timeout)
        except httpx.TimeoutException:
            raise PrometheusUnreachable("prometheus", f"the query API did not answer within {self.timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise PrometheusUnreachable("prometheus", f"the query API could not be reached: {type(exc).__name__}") from None
        return resp.status_code, resp.text

    async def aclose(self) -> None:
        await self._http.aclose()
