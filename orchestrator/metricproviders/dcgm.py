"""Device memory from DCGM's exporter (:9400/metrics) through a soak-relay route (`:8010 ->
dcgm-glm53:9400`): `DCGM_FI_DEV_FB_FREE{gpu="N"}` in MiB for every GPU of the host. A replica's
value is the lowest of its GPUs' (runbook `replica_gpus`): an engine runs out of memory on its
tightest rank, not on average.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from prometheus_client.parser import text_string_to_metric_families

from orchestrator.analysis.metric_defs import FB_FREE
from orchestrator.analysis.window import Scrape
from orchestrator.metricproviders.metrics_text import MetricsTextError
from orchestrator.metricproviders.relay_scrape import relay_text

if TYPE_CHECKING:
    from orchestrator.engine.steps.activities import Activities


def parse_dcgm(text: str, at: float, replica_gpus: Mapping[str, Sequence[int]]) -> dict[str, Scrape]:
    """replica -> a Scrape of one gauge, the lowest free MiB of its GPUs; a replica none of whose
    GPUs the text lists is left out (its series is absent)."""
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
    """One scrape of DCGM's exporter behind relay `port`, per replica, stamped with the run clock."""
    return parse_dcgm(await relay_text(rt, port, token_variable), rt.clock.monotonic(), replica_gpus)
