"""Live traffic on the simulated engines, as their /metrics show it (issue 23's canaries).

A production replica serves the long domain's traffic all day; its /metrics carry SGLang's
latency histograms (`sglang:time_to_first_token_seconds`, `sglang:time_per_output_token_seconds`,
one observation per finished request, SGLang's bucket bounds) and request counters
(`sglang:num_requests_total`, `sglang:num_aborted_requests_total`). The simulator derives them
from the engine's configuration, deterministically:

- requests arrive at `REQ_PER_MIN` per serving engine (ready, in proxy-glm53's pool, the serving
  path up); `low-traffic` cuts that to `LOW_REQ_PER_MIN`;
- latencies are log-normal around a median set by the engine's flags: `--prefill-decode-interval
  2` decodes faster (TPOT x0.63, the lab's 0.53-0.72x) at a 1.5 % TTFT cost; the #302 candidate
  (`--chunked-prefill-size 16384` with `SGLANG_DSA_INDEXER_QSPLIT=1`) TTFT x0.7, TPOT x0.7;
- engine faults on the rollout's new engine: `candidate-slower` (TPOT x1.4 of the pdi-1 engine),
  `candidate-errors` (5 % of requests aborted).

The histograms are cumulative counts `floor(n * CDF(le))`: they never go down while the engine
runs, and restart from 0 with a new container (a restart's counter reset).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

REQ_PER_MIN = 20.0
LOW_REQ_PER_MIN = 1.0
SIGMA = 0.35  # log-normal spread of the latencies
BASE_TTFT_S = 2.0
BASE_TPOT_S = 0.030

# SGLang's bucket bounds (sglang/srt/metrics/collector.py)
TTFT_BUCKETS = (0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 15.0, 20.0, 25.0, 30.0, 60.0, 120.0, math.inf)
TPOT_BUCKETS = (0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
                1.0, 2.5, math.inf)

TTFT = "sglang:time_to_first_token_seconds"
TPOT = "sglang:time_per_output_token_seconds"


@dataclass(frozen=True)
class Profile:
    ttft_s: float
    tpot_s: float
    error_share: float
    req_per_min: float


def _flag(command: str, name: str) -> str | None:
    m = re.search(rf"--{name}[ =](\S+)", command)
    return m.group(1) if m else None


def profile(command: str, env: dict[str, str], fault: str | None, *, low_traffic: bool) -> Profile:
    ttft, tpot = BASE_TTFT_S, BASE_TPOT_S
    if (_flag(command, "prefill-decode-interval") or "1") == "2":
        tpot *= 0.63
        ttft *= 1.015
    if _flag(command, "chunked-prefill-size") == "16384" and env.get("SGLANG_DSA_INDEXER_QSPLIT") == "1":
        ttft *= 0.7
        tpot *= 0.7
    if fault == "candidate-slower":
        tpot = BASE_TPOT_S * 1.4
    errors = {"candidate-errors": 0.05, "serving-errors": 0.2}.get(fault or "", 0.0)
    return Profile(ttft, tpot, errors,
                   LOW_REQ_PER_MIN if low_traffic else REQ_PER_MIN)


def _cdf(x: float, median: float) -> float:
    if math.isinf(x):
        return 1.0
    return 0.5 * (1.0 + math.erf(math.log(x / median) / (SIGMA * math.sqrt(2.0))))


def histogram_lines(name: str, bounds: tuple[float, ...], median: float, n: int, label: str) -> list[str]:
    out = [f"# HELP {name} Histogram of {name.split(':', 1)[1].replace('_', ' ')}.", f"# TYPE {name} histogram"]
    for le in bounds:
        count = n if math.isinf(le) else math.floor(n * _cdf(le, median))
        out.append(f'{name}_bucket{{le="{"+Inf" if math.isinf(le) else f"{le:g}"}",{label[1:-1]}}} {float(count)}')
    out.append(f"{name}_count{label} {float(n)}")
    out.append(f"{name}_sum{label} {n * median * math.exp(SIGMA ** 2 / 2):.6f}")
    return out


def served(p: Profile, seconds: float) -> tuple[int, int]:
    """(requests, aborted) over `seconds` of serving."""
    n = math.floor(p.req_per_min * seconds / 60.0)
    return n, math.floor(n * p.error_share)
