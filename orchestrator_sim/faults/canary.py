"""Issue 23's canary faults (live traffic and device memory, orchestrator_sim/host/live_traffic.py and
host/device_memory.py): aimed at a canary's analysis or a watch, so the schedule explorer does not draw
them. Built by `canary_faults(FaultInfo)` so table.py imports this module without a cycle."""

from __future__ import annotations

from typing import Any

_CANARY_ROLLBACK = ("the canary's analysis gate fails on the candidate's readout; the orchestrator rolls r2 back "
                    "to the previous file and tag, r1 untouched (ROLLED_BACK, exit 3)")


def canary_faults(info: Any) -> dict[str, Any]:
    """name -> FaultInfo of every canary fault (`info` is table.FaultInfo)."""
    return {f.name: f for f in [
        info("candidate-faster", "replica",
             "the new engine's live traffic is 30 % faster: TTFT and TPOT 0.7x of a pdi-1 engine in its /metrics "
             "histograms, whatever its flags",
             "a canary's analysis passes with every interval inside its bound: the candidate is promoted (DONE)",
             drawn=False),
        info("candidate-slower", "replica",
             "the new engine's live traffic is 30 % slower: TTFT and TPOT 1.3x of a pdi-1 engine in its /metrics "
             "histograms, whatever its flags",
             _CANARY_ROLLBACK, drawn=False),
        info("candidate-slightly-slower", "replica",
             "the new engine's live traffic is 3 % slower: TTFT and TPOT 1.03x of a pdi-1 engine, whatever its flags",
             "with `live-noise`, a canary's `no worse than the control` gate cannot tell: its interval straddles "
             "the bound, the readout is inconclusive and the run halts for a human (HALTED, exit 4)", drawn=False),
        info("live-noise", "none",
             "each minute of every engine's live traffic has its own mix: the latencies' median moves by a "
             "log-normal factor of spread 0.25 from minute to minute (calm: 0.03), seeded per engine slot",
             "a canary's intervals widen: a small difference is inconclusive rather than a pass or a fail",
             drawn=False),
        info("no-abort-counter", "replica",
             "the new engine's /metrics carries no sglang:num_aborted_requests_total (a build or flag set "
             "without it)",
             "a canary gate on the candidate's error or completion rate is unknown, never 100 %: the readout "
             "is inconclusive and the run halts for a human (HALTED, exit 4)", drawn=False),
        info("candidate-errors", "replica",
             "the new engine aborts 5 % of its live requests (sglang:num_aborted_requests_total)",
             _CANARY_ROLLBACK, drawn=False),
        info("low-traffic", "none",
             "live traffic drops to 1 request per minute per engine (the long domain at night)",
             "a canary's analysis sees too few samples: neither promoted nor rolled back, the run halts "
             "for a human with the readout (HALTED, exit 4)", drawn=False),
        info("memory-squeeze", "replica",
             "the new engine leaves 1.5 GB of device memory free on its tightest GPU (DCGM_FI_DEV_FB_FREE "
             "through the relay's DCGM route), below a canary's minimum-free-memory bound",
             _CANARY_ROLLBACK, drawn=False),
        info("serving-errors", "replica",
             "the engine of that replica already serving (e.g. `serving-errors:r1`, the control) aborts 20 % "
             "of its live requests from the start (its /metrics' aborted counter)",
             "a watch on that replica's error rate breaches while another step runs (e.g. r2's cold start): "
             "the phase fails into its rollback (ROLLED_BACK, exit 3)", drawn=False),
    ]}
