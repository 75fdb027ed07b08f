"""Live traffic on the simulated engines, as their /metrics show it (issue 23's canaries).

A production replica serves the long domain's traffic all day; its /metrics carry SGLang's
latency histograms (`sglang:time_to_first_token_seconds`, `sglang:inter_token_latency_seconds`,
one observation per finished request, SGLang's bucket bounds), request counters
(`sglang:num_requests_total`, `sglang:num_aborted_requests_total`), the prompt-length histogram
(`sglang:prompt_tokens_histogram`: `LONG_SHARE` of the finished requests carry a
`LONG_PROMPT_TOKENS` prompt, the others `SHORT_PROMPT_TOKENS`, averaging `PROMPT_TOKENS`) and the
HTTP server's `sglang:http_responses_total` (a finished request answers 200, an aborted one 500;
the proxy's /health probe every `HEALTH_PROBE_S` answers 200). The simulator derives them from the
engine's configuration, deterministically:

- requests arrive at `REQ_PER_MIN` per serving engine (ready, in proxy-glm53's pool, the serving
  path up); `low-traffic` cuts that to `LOW_REQ_PER_MIN`;
- latencies are log-normal around a median set by the engine's flags: `--prefill-decode-interval
  2` decodes faster (TPOT x0.63, the lab's 0.53-0.72x) at a 1.5 % TTFT cost; the #302 candidate
  (`--chunked-prefill-size 16384` with `SGLANG_DSA_INDEXER_QSPLIT=1`) TTFT x0.7, TPOT x0.7;
- engine faults on the rollout's new engine: `candidate-faster` / `candidate-slower` /
  `candidate-slightly-slower` (every latency x0.7 / x1.3 / x1.03 of the pdi-1 engine, whatever
  its flags), `candidate-errors` (5 % of requests aborted), `no-abort-counter` (a build whose
  /metrics has no `sglang:num_aborted_requests_total`);
- live noise: each minute of an engine's serving has its own traffic mix, so its latencies'
  median moves by a log-normal factor of spread `NOISE` (`live-noise`: `LIVE_NOISE`), drawn from
  a seeded generator per engine slot and minute: the same run shows the same minutes.

The histograms are cumulative counts `floor(sum over minutes of expected(minute) * CDF(le;
median x factor(minute)))`: they never go down while the engine runs, and restart from 0 with a
new container (a restart's counter reset). `sglang:e2e_request_latency_seconds` is TTFT plus
`OUTPUT_TOKENS` times TPOT, with the bucket bounds of SGLang's recorded /metrics page; the token
counters add `PROMPT_TOKENS` per request and `OUTPUT_TOKENS` per finished one.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field

REQ_PER_MIN = 20.0
LOW_REQ_PER_MIN = 1.0
SIGMA = 0.35  # log-normal spread of the latencies
BASE_TTFT_S = 2.0
BASE_TPOT_S = 0.030
OUTPUT_TOKENS = 400  # a long-domain answer: the end-to-end latency's decode part
PROMPT_TOKENS = 24000  # a long-domain prompt (the long tier serves 16K-64K-token contexts)
#: the prompt mix behind that mean: a tenth of the prompts past 64K tokens
LONG_SHARE = 0.1
LONG_PROMPT_TOKENS = 96000
SHORT_PROMPT_TOKENS = 16000
HEALTH_PROBE_S = 3.0
#: the spread of a minute's latency median (its traffic mix): calm, and with `live-noise`
NOISE = 0.03
LIVE_NOISE = 0.25
SLOT_S = 60.0
#: every latency of the candidate against the pdi-1 engine, per speed fault
SPEED_FAULTS = {"candidate-faster": 0.7, "candidate-slower": 1.3, "candidate-slightly-slower": 1.03}

# SGLang's bucket bounds: TTFT and E2E as on its documentation's /metrics page; the inter-token
# latency's and the prompt length's the collector's defaults (sglang/srt/observability/metrics_collector.py)
TTFT_BUCKETS = (0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 15.0, 20.0, 25.0, 30.0, 60.0, 120.0, math.inf)
TPOT_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100,
                0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0, math.inf)
PROMPT_BUCKETS = (100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000, 12000, 15000,
                  20000, 22000, 25000, 30000, 35000, 40000, 66000, 99000, 132000, 300000, 600000, 900000, 1100000,
                  math.inf)

E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, math.inf)

TTFT = "sglang:time_to_first_token_seconds"
TPOT = "sglang:inter_token_latency_seconds"
PROMPT_HIST = "sglang:prompt_tokens_histogram"
E2E = "sglang:e2e_request_latency_seconds"


@dataclass(frozen=True)
class Profile:
    ttft_s: float
    tpot_s: float
    error_share: float
    req_per_min: float
    noise: float = NOISE
    #: the engine exports sglang:num_aborted_requests_total (False: `no-abort-counter`)
    aborts_exported: bool = True

    @property
    def e2e_s(self) -> float:
        return self.ttft_s + OUTPUT_TOKENS * self.tpot_s


def _flag(command: str, name: str) -> str | None:
    m = re.search(rf"--{name}[ =](\S+)", command)
    return m.group(1) if m else None


def profile(command: str, env: dict[str, str], fault: str | None, *, low_traffic: bool,
            live_noise: bool = False) -> Profile:
    ttft, tpot = BASE_TTFT_S, BASE_TPOT_S
    if (_flag(command, "prefill-decode-interval") or "1") == "2":
        tpot *= 0.63
        ttft *= 1.015
    if _flag(command, "chunked-prefill-size") == "16384" and env.get("SGLANG_DSA_INDEXER_QSPLIT") == "1":
        ttft *= 0.7
        tpot *= 0.7
    if fault in SPEED_FAULTS:
        ttft, tpot = BASE_TTFT_S * SPEED_FAULTS[fault], BASE_TPOT_S * SPEED_FAULTS[fault]
    errors = {"candidate-errors": 0.05, "serving-errors": 0.2}.get(fault or "", 0.0)
    return Profile(ttft, tpot, errors,
                   LOW_REQ_PER_MIN if low_traffic else REQ_PER_MIN, LIVE_NOISE if live_noise else NOISE,
                   fault != "no-abort-counter")


def _cdf(x: float, median: float) -> float:
    if math.isinf(x):
        return 1.0
    return 0.5 * (1.0 + math.erf(math.log(x / median) / (SIGMA * math.sqrt(2.0))))


@dataclass
class Accrued:
    """An engine's live histograms as accrued so far (expected counts, real-valued): what its
    /metrics show is their floor. Kept on the engine (host/containers.py `EngineRun.live_hist`), so a
    scrape adds only the minutes since the last one; a new container starts from nothing."""

    seconds: float = 0.0
    buckets: dict[str, list[float]] = field(default_factory=dict)
    sums: dict[str, float] = field(default_factory=dict)


#: minutes further back than this before a scrape are accrued at the calm mix in one piece: no
#: window reaches them (the first scrape of an engine serving for days, a long pause between reads)
RECENT_S = 4 * 3600.0


def _factor(p: Profile, key: str, minute: int) -> float:
    return math.exp(p.noise * random.Random(f"live-traffic:{key}:{minute}").gauss(0.0, 1.0))


def accrue(acc: Accrued, p: Profile, key: str, seconds: float,
           hists: list[tuple[str, tuple[float, ...], float]]) -> None:
    """Add the minutes from `acc.seconds` to `seconds` of serving: each minute's finished requests
    at its own latency factor (seeded by `key`, the engine's slot, and the minute's index)."""
    for name, bounds, _ in hists:
        acc.buckets.setdefault(name, [0.0] * len(bounds))
        acc.sums.setdefault(name, 0.0)
    pieces: list[tuple[float, float]] = []  # (span, factor)
    t = acc.seconds
    if seconds - t > RECENT_S:
        pieces.append((seconds - RECENT_S - t, 1.0))
        t = seconds - RECENT_S
    while t < seconds:
        minute = int(t // SLOT_S)
        end = min(seconds, (minute + 1) * SLOT_S)
        pieces.append((end - t, _factor(p, key, minute)))
        t = end
    for span, f in pieces:
        weight = p.req_per_min * (1.0 - p.error_share) * span / 60.0
        for name, bounds, median in hists:
            b = acc.buckets[name]
            for j, le in enumerate(bounds):
                b[j] += weight * _cdf(le, median * f)
            acc.sums[name] += weight * median * f * math.exp(SIGMA ** 2 / 2)
    acc.seconds = max(acc.seconds, seconds)


def histogram_lines(name: str, bounds: tuple[float, ...], acc: Accrued, n: int, label: str) -> list[str]:
    """The histogram of `n` finished requests as accrued in `acc`."""
    out = [f"# HELP {name} Histogram of {name.split(':', 1)[1].replace('_', ' ')}.", f"# TYPE {name} histogram"]
    expected = acc.buckets.get(name, [0.0] * len(bounds))
    for le, e in zip(bounds, expected):
        count = n if math.isinf(le) else min(n, math.floor(e))
        out.append(f'{name}_bucket{{le="{"+Inf" if math.isinf(le) else f"{le:g}"}",{label[1:-1]}}} {float(count)}')
    out.append(f"{name}_count{label} {float(n)}")
    out.append(f"{name}_sum{label} {acc.sums.get(name, 0.0):.6f}")
    return out


def served(p: Profile, seconds: float) -> tuple[int, int]:
    """(requests, aborted) over `seconds` of serving."""
    n = math.floor(p.req_per_min * seconds / 60.0)
    return n, math.floor(n * p.error_share)


def prompt_histogram_lines(finished: int, label: str) -> list[str]:
    """`sglang:prompt_tokens_histogram` of `finished` requests (the prompt mix above)."""
    long_n = math.floor(finished * LONG_SHARE)
    out = [f"# HELP {PROMPT_HIST} Histogram of prompt token length.", f"# TYPE {PROMPT_HIST} histogram"]
    for le in PROMPT_BUCKETS:
        count = (le >= SHORT_PROMPT_TOKENS) * (finished - long_n) + (le >= LONG_PROMPT_TOKENS) * long_n
        out.append(f'{PROMPT_HIST}_bucket{{le="{"+Inf" if math.isinf(le) else f"{float(le):g}"}",{label[1:-1]}}} {float(count)}')
    out.append(f"{PROMPT_HIST}_count{label} {float(finished)}")
    out.append(f"{PROMPT_HIST}_sum{label} {float((finished - long_n) * SHORT_PROMPT_TOKENS + long_n * LONG_PROMPT_TOKENS)}")
    return out


def http_response_lines(finished: int, aborted: int, live_s: float) -> list[str]:
    """`sglang:http_responses_total` (labelled by endpoint, method and status code, not model)."""
    name = "sglang:http_responses_total"
    rows = [("/v1/chat/completions", "POST", "200", finished), ("/v1/chat/completions", "POST", "500", aborted),
            ("/health", "GET", "200", math.floor(live_s / HEALTH_PROBE_S))]
    out = [f"# HELP {name} Total number of HTTP responses by endpoint and status code", f"# TYPE {name} counter"]
    out += [f'{name}{{endpoint="{e}",method="{m}",status_code="{c}"}} {float(n)}' for e, m, c, n in rows if n]
    return out
