"""The metrics a runbook's analysis, watch or quiet gate may name, and the series each is read
from. Apart from `orchestrator.analysis.window` (re-exported there), so that the runbook schema
checks a metric's name without the window arithmetic."""

from __future__ import annotations

from dataclasses import dataclass

#: SGLang's own series (sglang/srt/metrics/collector.py; each name below is in the recorded /metrics
#: page tests/data/reference/samples/sglang-metrics.txt but the aborted counter, which is the
#: collector's): latency histograms in seconds, request and token counters.
#: `num_aborted_requests_total` counts requests the engine aborted (errors, timeouts, client
#: aborts): the engine's own error count; SGLang keeps no per-status HTTP counter.
TTFT = "sglang:time_to_first_token_seconds"
TPOT = "sglang:time_per_output_token_seconds"
E2E = "sglang:e2e_request_latency_seconds"
PROMPT_TOKENS = "sglang:prompt_tokens_total"
GENERATION_TOKENS = "sglang:generation_tokens_total"
REQUESTS = "sglang:num_requests_total"
ABORTED = "sglang:num_aborted_requests_total"
QUEUE = "sglang:num_queue_reqs"
#: DCGM's per-GPU free framebuffer (MiB); orchestrator/metricproviders/dcgm.py gives each replica
#: the lowest of its GPUs' (runbook `replica_gpus`)
FB_FREE = "DCGM_FI_DEV_FB_FREE"


@dataclass(frozen=True)
class MetricDef:
    name: str
    #: quantile | mean (a histogram's sum / count) | error_rate | completion_rate | request_rate |
    #: per_request (a counter / requests) | gauge_min | gauge_max
    kind: str
    source: str
    q: float | None = None
    unit: str = "s"  # s | share | per_s | GB | requests | tokens
    doc: str = ""
    scale: float = 1.0  # a gauge's value is divided by this (DCGM's MiB -> GB)
    #: where the series is read: "engine" (the replica's own /metrics) or "dcgm" (the exporter)
    origin: str = "engine"


def _quantiles(prefix: str, series: str, what: str) -> dict[str, MetricDef]:
    return {f"{prefix}_p{p}": MetricDef(f"{prefix}_p{p}", "quantile", series, p / 100, "s", f"{what} p{p} over the window")
            for p in (50, 90, 95, 99)}


METRICS: dict[str, MetricDef] = {
    **_quantiles("ttft", TTFT, "time to first token"),
    **_quantiles("tpot", TPOT, "time per output token"),
    **_quantiles("e2e", E2E, "end-to-end request latency"),
    "tpot_mean": MetricDef("tpot_mean", "mean", TPOT,
                           doc="mean time per output token (the inter-token latency) over the window: the histogram's sum / count"),
    "prompt_tokens_per_request": MetricDef("prompt_tokens_per_request", "per_request", PROMPT_TOKENS, unit="tokens",
                                           doc="prompt tokens per request over the window (the traffic's input length)"),
    "generation_tokens_per_request": MetricDef(
        "generation_tokens_per_request", "per_request", GENERATION_TOKENS, unit="tokens",
        doc="generated tokens per request over the window (the traffic's output length)"),
    "error_rate": MetricDef("error_rate", "error_rate", ABORTED, unit="share",
                            doc="aborted requests / requests over the window"),
    "completion_rate": MetricDef("completion_rate", "completion_rate", ABORTED, unit="share",
                                 doc="1 - aborted requests / requests over the window"),
    "request_rate": MetricDef("request_rate", "request_rate", REQUESTS, unit="per_s",
                              doc="requests per second over the window"),
    "queue_depth_max": MetricDef("queue_depth_max", "gauge_max", QUEUE, unit="requests",
                                 doc="the most requests waiting in the engine's queue at any scrape"),
    "min_free_device_memory_gb": MetricDef(
        "min_free_device_memory_gb", "gauge_min", FB_FREE, unit="GB", scale=1024.0, origin="dcgm",
        doc="the least free device memory (GB) on any of the replica's GPUs at any scrape (DCGM)"),
}
#: gauges need this many scrapes carrying them (a value seen once is not a window)
GAUGE_MIN_SCRAPES = 2
