"""Running a step under its `watch:` (analysis/watch_spec.py): the first of the two to end decides.
The step ending ends the watch; a breach cancels the step and fails it, so the rollback follows.

Each poll scrapes the replica's /metrics through its relay; rates are taken over the last `window`
(analysis/window.py) and not judged on fewer than `min_samples` requests (quiet is not failing);
a gauge is judged at every scrape. A metric the replica does not carry is unknown, never within
bounds: it fails the step (`on_unknown: fail`) or is noted once (`note`).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from orchestrator.analysis.verdict import fmt_value
from orchestrator.analysis.window import METRICS, Scrape, WindowError, measure, window_of
from orchestrator.engine.steps.base import StepOutcome, error_text, fail

if TYPE_CHECKING:
    from orchestrator.analysis.watch_spec import WatchSpec
    from orchestrator.engine.steps.activities import Activities
    from orchestrator.engine.steps.base import Handler
    from orchestrator.language.machine import Node

MISSES = 3


def unknown(spec: WatchSpec, scrapes: list[Scrape]) -> dict[str, str]:
    """metric -> why it is unknown, for each watched metric whose series the window lacks."""
    try:
        w = window_of(spec.replica, scrapes)
    except WindowError:
        return {}  # a window that cannot be combined is breach()'s to name
    out: dict[str, str] = {}
    for metric, _, _ in spec.bounds():
        m = measure(metric, w)
        if m.absent is not None:
            out[metric] = (f"{spec.replica}'s /metrics carried {m.absent} in only part of the window" if m.partial
                           else f"{spec.replica}'s /metrics carries no {m.absent}")
    return out


def breach(spec: WatchSpec, scrapes: list[Scrape]) -> str | None:
    """The first bound the window crosses on enough traffic, in one phrase; else None."""
    try:
        w = window_of(spec.replica, scrapes)
    except WindowError as exc:
        return str(exc)
    for metric, lo, hi in spec.bounds():
        m = measure(metric, w)
        if m.value is None:
            continue
        if not METRICS[metric].kind.startswith("gauge") and m.samples < spec.min_samples:
            continue
        if (hi is not None and m.value > hi) or (lo is not None and m.value < lo):
            bound = f"<= {hi:g}" if hi is not None else f">= {lo:g}"
            return (f"{spec.replica} {metric} = {fmt_value(metric, m.value)} over the last "
                    f"{int(w.seconds)} s ({int(m.samples)} samples), not {bound}")
    return None


async def watch(rt: Activities, spec: WatchSpec) -> str:
    """Poll until a breach; return it (the caller cancels this when the step ends first)."""
    from orchestrator.metricproviders.relay_scrape import read_scrape

    scrapes: list[Scrape] = []
    misses = 0
    noted: set[str] = set()
    while True:
        try:
            s = await read_scrape(rt, spec.relay.port, spec.relay.token_variable)
            misses = 0
            scrapes.append(s)
            # keep the last `window` (and the scrape just before it: the increase's start)
            while len(scrapes) > 2 and scrapes[1].at <= s.at - spec.window:
                scrapes.pop(0)
            found = breach(spec, scrapes) if len(scrapes) >= 2 else None
            if found:
                return found
            for metric, why in (unknown(spec, scrapes) if len(scrapes) >= 2 else {}).items():
                if spec.on_unknown == "fail":
                    return (f"{spec.replica} {metric} is unknown ({rt.scrub(why)}): a watch that cannot see it does not "
                            f"watch it (on_unknown: fail)")
                if metric not in noted:
                    noted.add(metric)
                    text = f"watch on {spec.replica}: {metric} is unknown ({rt.scrub(why)}): not watched (on_unknown: note)"
                    rt.log.warning("watch_metric_unknown", replica=spec.replica, metric=metric, text=text)
                    rt.emit("note", text=text)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the relay client's errors and bad text, counted, then named
            misses += 1
            if misses >= MISSES:
                return (f"{spec.replica}'s metrics (relay :{spec.relay.port}) could not be read {MISSES} times in a "
                        f"row: {rt.scrub(error_text(exc))}")
        await rt.wait(spec.poll)


async def run_watched(rt: Activities, node: Node, handler: Handler) -> StepOutcome:
    step = node.step
    assert step is not None and step.watch is not None
    spec = step.watch
    work = asyncio.ensure_future(handler(rt, node, step))
    watcher = asyncio.ensure_future(watch(rt, spec))
    try:
        await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (work, watcher):
            if not t.done():
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
    if work.done() and not work.cancelled():
        return work.result()  # the step ended first: its own outcome (or its exception) stands
    return fail(f"watch on {spec.replica} during {step.id}: {watcher.result()}")
