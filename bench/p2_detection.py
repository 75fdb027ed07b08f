"""P2 detection latency: from the simulator's decisive event to the orchestrator's transition.

Each trial is a fresh simulated gpu02 and a real rollout (admission.new_rollout + runner.execute)
whose state table is cut short around one gate, the new r2's cold-start log gate:

- `ready`: the happy path; the gate passes on the engine's ready line (the table ends at DONE
  right after the gate);
- `oom` / `cuda-801` (simulator faults on r2): the engine logs the forbidden line and exits at
  96% / 60% of its cold start; the gate fails, the phase rollback starts (relay stop, then the
  scoped down of the new r2), and the table ends ROLLED_BACK after that down.

The simulator and the orchestrator share one `WarpClock`: the setup (preflight, the 5-minute stop
grace of the old r2, pull, start) runs at `setup_speed`, and from `margin_s` simulated seconds
before the decisive event on, everything runs at `measure_speed`, so that the orchestrator's
real milliseconds per poll are small against the 10-second poll interval. The cold-start length
and the opening of the slow window are drawn per trial (each uniform over one poll interval), so
the event falls at a random phase of the poll cycle.

Measured per trial (simulation seconds):
- detection = executor transition out of the gate - simulator event (ready line, or failing exit);
- wait part = arrival of the poll that saw it - event; the rest is that poll's own processing;
- for failures: failure -> first call of the rollback, and failure -> first rollback effect
  (compose/down).
A warm-up trial is run first and not counted. A trial whose slow window did not begin at least one
poll interval before the event (the event loop was held up while the clock ran at setup speed) is
discarded and replaced; discarded trials are listed in the results.
Goal: p95 of detection <= 1.1 x poll interval (11 s).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from orchestrator.language.machine import DONE, ROLLED_BACK, Event, Table
from orchestrator_sim.host.sglang_log import MILESTONES

from bench.harness import POLL_INTERVAL_S, SimRun
from bench.run_analysis import detections, rollback_reactions
from bench.sim_fixes import label
from bench.stats import summary
from bench.timed_progress import TimedProgress
from bench.warp_clock import WarpClock

R2_NEW = "model-sg-glm53-w4afp8-tp4-r2"
#: The measured window's speed: x10, so that a real millisecond of the orchestrator's (or of a machine
#: shared with other work) is 10 simulated ones, not 50 (the figures before issue 25 were at x50).
MEASURE_SPEED = 10.0
DETECTION_LIMIT_S = 2.0
ROLLBACK_LIMIT_S = 3.0
GATE = "r2.cold-start"
FRACTION = {"ready": 1.0, "oom": dict(MILESTONES)["graph_end"], "cuda-801": dict(MILESTONES)["hicache"]}


def trial_table(table: Table) -> Table:
    """The rollout table, ending right after the r2 cold-start gate (or after the rollback's down of the new r2)."""
    edges = dict(table.edges)
    edges[(GATE, Event.OK)] = DONE
    edges[("r2.rollback.stop-new", Event.OK)] = ROLLED_BACK
    return dataclasses.replace(table, edges=edges)


async def _trial(kind: str, *, seed: int, setup_speed: float, measure_speed: float, margin_s: float,
                 base_cold_start_s: float, fixed: bool, poll: float, probe: float | None = None) -> dict[str, Any]:
    rng = random.Random(seed)
    cold = base_cold_start_s + rng.uniform(0, poll)
    # The slow window opens margin_s + U(0, poll) before the event: the event then falls at a
    # uniformly random phase of the slow poll cycle, whatever the executor did at setup speed.
    margin_s = margin_s + rng.uniform(0, poll)
    clock = WarpClock(setup_speed)
    faults = [] if kind == "ready" else [f"{kind}:r2"]
    with tempfile.TemporaryDirectory(prefix="bench-p2-") as tmp:
        sim = SimRun(Path(tmp), speed=setup_speed, cold_start_s=cold, faults=faults, seed=seed, clock=clock,
                     poll_interval=poll, fixed=fixed, log_probe_interval=probe)
        with sim:
            run, rb, table = sim.new_run()
            table = trial_table(table)
            progress = TimedProgress(clock)
            done = asyncio.Event()
            switched: list[float] = []

            async def warp() -> None:
                while not done.is_set():
                    started = sim.events.of("started", R2_NEW)
                    if started:
                        decisive = started[0].at + FRACTION[kind] * cold
                        if clock.monotonic() >= decisive - margin_s:
                            clock.set_speed(measure_speed)
                            switched.append(clock.monotonic())
                            return
                    await asyncio.sleep(0.001)

            async def go() -> Any:
                try:
                    return await sim.execute(run, rb, table, progress=progress)
                finally:
                    done.set()

            warper = asyncio.ensure_future(warp())
            out = await go()
            await warper
            found = [d for d in detections(out, table) if d.gate == GATE]
            reactions = rollback_reactions(out, table)
    if not found:
        return {"kind": kind, "seed": seed, "outcome": out.final.outcome, "error": "no detection found"}
    d = found[0]
    if not switched or d.event_at < switched[0] + poll:
        # the slow window did not start a full poll interval before the event (the loop was held
        # up at setup speed): this trial did not measure what it should; the caller runs another
        return {"kind": kind, "seed": seed, "outcome": out.final.outcome, "invalid": True,
                "switched_at": switched[0] if switched else None, "event_at": d.event_at}
    row: dict[str, Any] = {
        "kind": kind, "seed": seed, "outcome": out.final.outcome, "cold_start_s": cold,
        "detection_s": d.latency, "wait_s": (d.detecting_call_at - d.event_at) if d.detecting_call_at else None,
        "event": d.kind,
    }
    if reactions:
        r = reactions[0].as_dict()
        row["to_first_rollback_call_s"] = r["to_first_call"]
        row["to_first_rollback_effect_s"] = r["to_first_effect"]
    return row


def run(*, trials: dict[str, int], setup_speed: float = 2000.0, measure_speed: float = MEASURE_SPEED, margin_s: float = 25.0,
        base_cold_start_s: float = 600.0, fixed: bool = True, poll: float = POLL_INTERVAL_S, seed: int = 1,
        probe: float | None = None, warm_up: bool = True, progress: Any = None) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    invalid: list[dict[str, Any]] = []
    t0 = time.monotonic()
    order = [k for k, c in trials.items() for _ in range(c)]
    random.Random(seed).shuffle(order)
    kw = dict(setup_speed=setup_speed, measure_speed=measure_speed, margin_s=margin_s,
              base_cold_start_s=base_cold_start_s, fixed=fixed, poll=poll, probe=probe)
    if warm_up:
        asyncio.run(_trial("ready", seed=seed * 1000 + 999, **kw))  # warm-up (first imports, first TLS context): not counted
    next_seed = seed * 1000
    for i, kind in enumerate(order):
        for _attempt in range(3):
            row = asyncio.run(_trial(kind, seed=next_seed, **kw))
            next_seed += 1
            if not row.get("invalid"):
                break
            invalid.append(row)
        rows.append(row)
        if progress is not None:
            progress(f"P2 trial {i + 1}/{len(order)} {kind}: detection {row.get('detection_s', float('nan')):.2f} s")
    ok = [r for r in rows if "detection_s" in r and not r.get("invalid")]
    det = [r["detection_s"] for r in ok]
    from orchestrator.util.settings import Settings

    result: dict[str, Any] = {
        "poll_interval_s": poll,
        "log_probe_interval_s": probe if probe is not None else Settings.model_fields["log_probe_interval"].default,
        "setup_speed": setup_speed,
        "measure_speed": measure_speed,
        "simulator": label(fixed),
        "trials": len(rows),
        "errors": [r for r in rows if "error" in r],
        "discarded_trials": invalid,
        "detection": summary(det),
        "detection_by_kind": {k: summary([r["detection_s"] for r in ok if r["kind"] == k]) for k in trials},
        "wait_part": summary([r["wait_s"] for r in ok if r.get("wait_s") is not None]),
        "processing_part": summary([r["detection_s"] - r["wait_s"] for r in ok if r.get("wait_s") is not None]),
        "failure_to_first_rollback_call": summary([r["to_first_rollback_call_s"] for r in ok
                                                   if r.get("to_first_rollback_call_s") is not None]),
        "failure_to_first_rollback_effect": summary([r["to_first_rollback_effect_s"] for r in ok
                                                     if r.get("to_first_rollback_effect_s") is not None]),
        "outcomes": {k: sorted({r["outcome"] for r in rows if r["kind"] == k}) for k in trials},
        "real_s": time.monotonic() - t0,
        "rows": rows,
    }
    # issue 25: detection p95 <= 2 s after the line is logged, failure -> first rollback call p95 <= 3 s
    p95 = result["detection"]["p95"]
    p95_rb = result["failure_to_first_rollback_call"]["p95"]
    result["goal"] = {"limit_s": DETECTION_LIMIT_S, "rollback_limit_s": ROLLBACK_LIMIT_S,
                      "detection_p95_met": p95 is not None and p95 <= DETECTION_LIMIT_S,
                      "rollback_call_p95_met": p95_rb is not None and p95_rb <= ROLLBACK_LIMIT_S}
    return result


def suite(*, quick: bool = False, smoke: bool = False, progress: Any = None) -> dict[str, Any]:
    """Before (probes off: a poll every 10 s) and after (the settings' log probes), side by side in
    one run, same trials (same seeds)."""
    t0 = time.monotonic()
    if smoke:
        trials = {"oom": 1}
    elif quick:
        trials = {"ready": 4, "oom": 3, "cuda-801": 3}
    else:
        trials = {"ready": 10, "oom": 8, "cuda-801": 8}
    speed = 100.0 if smoke else MEASURE_SPEED
    out: dict[str, Any] = {"main": run(trials=trials, fixed=True, measure_speed=speed, warm_up=not smoke, progress=progress),
                           "before": run(trials=trials, fixed=True, probe=0.0, measure_speed=speed, warm_up=not smoke,
                                         progress=progress)}
    out["real_s"] = time.monotonic() - t0
    return out
