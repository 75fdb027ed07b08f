"""The metrics a runbook's analysis, watch or quiet gate may name, and the series each is read
from: apart from `window` (which re-exports them) so that the schema needs no window arithmetic."""

from __future__ import annotations

from dataclasses import dataclass

#: SGLang's own series (sglang/srt/observability/metrics_collector.py; the HTTP counter is
#: sglang/srt/utils/common.py's), each in a recorded sample under tests/data/reference/samples/.
#: `num_aborted_requests_total` counts requests the engine aborted (errors, timeouts, client aborts).
TTFT = "sglang:time_to_first_token_seconds"
#: the inter-token latency histogram (one observation per generated token: sum / count is the mean
#: time per output token); the pinned image exports only this name, not `time_per_output_token_seconds`.
TPOT = "sglang:inter_token_latency_seconds"
E2E = "sglang:e2e_request_latency_seconds"
PROMPT_TOKENS = "sglang:prompt_tokens_total"
GENERATION_TOKENS = "sglang:generation_tokens_total"
REQUESTS = "sglang:num_requests_total"
ABORTED = "sglang:num_aborted_requests_total"
#: each finished request's prompt length (tokens), exported with `--enable-metrics` (older builds
#: also needed `--collect-tokens-histogram`); default bounds ..., 40000, 66000, 99000, ...
PROMPT_HIST = "sglang:prompt_tokens_histogram"
#: the HTTP server's responses, read as two counters of the generation endpoints only (health probes
#: and scrapes answer on the same server): all their responses, and those with a 5xx status other
#: than 503 (SGLang's answer to a full queue: load shedding, not an error).
HTTP_RESPONSES = "sglang:http_responses_total"
HTTP_SERVED = HTTP_RESPONSES + "{generation endpoints}"
HTTP_5XX = HTTP_RESPONSES + "{generation endpoints, 5xx but 503}"
GENERATION_ENDPOINTS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/responses", "/generate"})
#: the long tier's long prompts: at least 64K tokens
LONG_PROMPT_TOKENS = 65536.0
QUEUE = "sglang:num_queue_reqs"
#: DCGM's per-GPU free framebuffer (MiB); orchestrator/metricproviders/dcgm.py gives each replica
#: the lowest of its GPUs' (runbook `replica_gpus`)
FB_FREE = "DCGM_FI_DEV_FB_FREE"


@dataclass(frozen=True)
class MetricDef:
    name: str
    #: quantile | mean (a histogram's sum / count) | share_above (of a histogram's observations,
    #: above `threshold`) | error_rate | completion_rate | request_rate | per_request (a counter /
    #: requests) | http_5xx_rate | gauge_min | gauge_max
    kind: str
    source: str
    q: float | None = None
    unit: str = "s"  # s | share | per_s | GB | requests | tokens
    doc: str = ""
    scale: float = 1.0  # a gauge's value is divided by this (DCGM's MiB -> GB)
    #: where the series is read: "engine" (the replica's own /metrics) or "dcgm" (the exporter)
    origin: str = "engine"
    threshold: float | None = None

    @property
    def hist(self) -> bool:
        """Read from one histogram (else from counters, or a gauge)."""
        return self.kind in ("quantile", "mean", "share_above")


def _quantiles(prefix: str, series: str, what: str, unit: str = "s") -> list[MetricDef]:
    return [MetricDef(f"{prefix}_p{p}", "quantile", series, p / 100, unit, f"{what} p{p} over the window")
            for p in (50, 90, 95, 99)]


METRICS: dict[str, MetricDef] = {d.name: d for d in [
    *_quantiles("ttft", TTFT, "time to first token"),
    *_quantiles("tpot", TPOT, "time per output token"),
    *_quantiles("e2e", E2E, "end-to-end request latency"),
    *_quantiles("prompt_tokens", PROMPT_HIST, "prompt length (tokens)", "tokens"),
    MetricDef("long_prompt_share", "share_above", PROMPT_HIST, unit="share", threshold=LONG_PROMPT_TOKENS,
              doc="share of the window's prompts longer than 64K (65,536) tokens, interpolated inside SGLang's "
                  "40000-66000 bucket: whether the replicas saw the same long-prompt mix"),
    MetricDef("http_5xx_rate", "http_5xx_rate", HTTP_RESPONSES, unit="share",
              doc="responses of the generation endpoints with a 5xx status other than 503 / all their responses over "
                  "the window"),
    MetricDef("tpot_mean", "mean", TPOT,
              doc="mean time per output token (the inter-token latency) over the window: the histogram's sum / count"),
    MetricDef("prompt_tokens_per_request", "per_request", PROMPT_TOKENS, unit="tokens",
              doc="prompt tokens per request over the window (the traffic's input length)"),
    MetricDef("generation_tokens_per_request", "per_request", GENERATION_TOKENS, unit="tokens",
              doc="generated tokens per request over the window (the traffic's output length)"),
    MetricDef("error_rate", "error_rate", ABORTED, unit="share", doc="aborted requests / requests over the window"),
    MetricDef("completion_rate", "completion_rate", ABORTED, unit="share",
              doc="1 - aborted requests / requests over the window"),
    MetricDef("request_rate", "request_rate", REQUESTS, unit="per_s", doc="requests per second over the window"),
    MetricDef("queue_depth_max", "gauge_max", QUEUE, unit="requests",
              doc="the most requests waiting in the engine's queue at any scrape"),
    MetricDef("min_free_device_memory_gb", "gauge_min", FB_FREE, unit="GB", scale=1024.0, origin="dcgm",
              doc="the least free device memory (GB) on any of the replica's GPUs at any scrape (DCGM)"),
]}
#: gauges need this many scrapes carrying them (a value seen once is not a window)
GAUGE_MIN_SCRAPES = 2
