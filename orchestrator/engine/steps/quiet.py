"""`quiet:` wait for a quiet long domain (the replicas' summed request rate over the last `over`) or a
time window, then ask a human after a bound. A replica whose relay does not answer serves nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from orchestrator.analysis.quiet_spec import QuietSpec, inside
from orchestrator.analysis.window import REQUESTS, Scrape, counter_increase
from orchestrator.engine.steps.base import Activities, Node, Step, StepOutcome, ok, register
from orchestrator.util.durations import format_duration

#: the UTC wall clock the window is read on (tests replace it: a window must not depend on when CI runs)
WALL: Callable[[], datetime] = lambda: datetime.now(UTC)  # noqa: E731 - a name tests replace


def rate_per_min(series: dict[str, list[Scrape]], over: float) -> tuple[float, float] | None:
    """(requests/min summed over replicas, seconds covered) over the last `over`; None before two scrapes."""
    total, covered = 0.0, 0.0
    for scrapes in series.values():
        recent = [s for s in scrapes if s.at >= scrapes[-1].at - over] if scrapes else []
        if len(recent) < 2:
            continue
        inc, _ = counter_increase([s.counters.get(REQUESTS, 0.0) for s in recent])
        secs = recent[-1].at - recent[0].at
        if secs > 0:
            total += inc * 60.0 / secs
            covered = max(covered, secs)
    return (total, covered) if covered > 0 else None


@register("quiet")
async def quiet(rt: Activities, node: Node, step: Step) -> StepOutcome:
    from orchestrator.metricproviders.relay_scrape import read_scrape

    spec = step.spec(QuietSpec)
    series: dict[str, list[Scrape]] = {r: [] for r in spec.relay.ports}
    start = rt.clock.monotonic()
    wall0 = WALL()
    asked = False
    rt.start_heartbeat()
    rt.emit("waiting", gate=f"quiet: {spec.describe()}")
    while True:
        elapsed = rt.clock.monotonic() - start
        now = wall0.timestamp() + elapsed
        minute = int(now // 60) % (24 * 60)
        if spec.or_between and inside(spec.or_between, minute):
            return ok(f"inside the {spec.or_between} UTC window after {format_duration(int(elapsed))}")
        for r, port in spec.relay.ports.items():
            try:
                series[r].append(await read_scrape(rt, port, spec.relay.token_variable))
                series[r] = [s for s in series[r] if s.at >= series[r][-1].at - 2 * spec.over]
            except Exception:  # a replica that does not answer serves nothing
                series[r] = []
        seen = rate_per_min(series, spec.over)
        if seen is not None and seen[1] >= spec.over * 0.9 and seen[0] < spec.below_per_min:
            return ok(f"the long domain is quiet: {seen[0]:.1f} requests/min over the last "
                      f"{format_duration(int(seen[1]))} (below {spec.below_per_min:g}), after {format_duration(int(elapsed))}")
        if elapsed >= spec.wait_at_most:
            approvals = rt.approvals()
            if rt.yes and not {node.id, "*"} & approvals:
                rt.approve(node.id, by="--yes")
                approvals = {node.id}
            if {node.id, "*"} & approvals:
                rate = f"{seen[0]:.1f} requests/min" if seen else "unknown traffic"
                return ok(f"not quiet after {format_duration(int(elapsed))} ({rate}, not below {spec.below_per_min:g}); "
                          f"a human approved going on")
            if not asked:
                rate = f"{seen[0]:.1f} requests/min" if seen else "traffic unknown"
                rt.emit("waiting", gate=f"quiet: still {rate} after {format_duration(int(elapsed))}; go on anyway with "
                                        f"`orchestrate approve {rt.run.run_id}`")
                asked = True
        rt.tick("waiting for a quiet long domain", start, spec.wait_at_most,
                lambda: {"requests_per_min": round(seen[0], 1) if seen else None})
        await rt.wait(spec.poll)
