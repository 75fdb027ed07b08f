"""Device memory from DCGM's exporter (`dcgm-exporter`, :9400/metrics), read through a soak-relay
route that reaches it (the #302 relay's `:8010 -> dcgm-glm53:9400`): per GPU
`DCGM_FI_DEV_FB_FREE{gpu="N"}` in MiB. One scrape of the exporter covers every GPU of the host; a
replica's value is the lowest of its GPUs' (runbook `replica_gpus`): an engine runs out of memory on
its tightest rank, not on average.

`parse_dcgm` is pure; `read_dcgm` fetches through the executor's relay client (`rt`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client.parser import text_string_to_metric_families

from orchestrator.analysis.window import FB_FREE, Scrape
from orchestrator.metricproviders.metrics_text import MetricsTextError

if TYPE_CHECKING:
    from orchestrator.engine.steps.activities import Activities


def parse_dcgm(text: str, at: float, replica_gpus: Mapping[str, Sequence[int]]) -> dict[str, Scrape]:
    """replica -> a Scrape carrying one gauge, `DCGM_FI_DEV_FB_FREE` = the lowest free MiB of the
    replica's GPUs. A replica none of whose GPUs the text lists is left out (its gate then says
    the series is absent). A text the parser refuses: `MetricsTextError`."""
    free: dict[int, float] = {}
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name == FB_FREE and "gpu" in s.labels:
                    free[int(s.labels["gpu"])] = float(s.value)
    except Exception as exc:  # the parser raises ValueError/IndexError/KeyError on bad input
        raise MetricsTextError(f"DCGM's /metrics text does not parse: {type(exc).__name__}: {exc}") from None
    out: dict[str, Scrape] = {}
    for replica, gpus in replica_gpus.items():
        seen = [free[g] for g in gpus if g in free]
        if seen:
            out[replica] = Scrape(at, gauges={FB_FREE: min(seen)})
    return out


async def read_dcgm(rt: Activities, port: int, token_variable: str,
                    replica_gpus: Mapping[str, Sequence[int]]) -> dict[str, Scrape]:
    """One scrape of DCGM's exporter behind relay `port`, split per replica, stamped with the run
    clock. Raises what the relay client raises (the caller counts misses) or `MetricsTextError`."""
    env = await rt.ensure_env()
    client: Any = rt.relay_client(port, env.get(token_variable, ""))
    text = await client.metrics_text()
    return parse_dcgm(text, rt.clock.monotonic(), replica_gpus)
