"""`watch:` on a step: one replica's metrics watched while the step runs (docs/runbook-language.md),
like Argo Rollouts' background analysis, on a replica that is not the one being changed. A breach, or
a replica unreadable 3 polls in a row, fails the step; a watch never passes one. Pure: the loader's
part only (orchestrator/engine/executor/watch.py runs it).

A watched metric the replica's /metrics does not carry (or carries from only part of the window) is
unknown, never "within bounds". `on_unknown: fail` (the default) fails the step: the watched replica
carries the traffic alone while the step runs, and a watch that cannot see is no protection. `note`
says so once per metric and watches the others (for a nice-to-have metric).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from orchestrator.analysis.metric_defs import METRICS
from orchestrator.analysis.spec import Seconds, _Strict, check_poll
from orchestrator.util.durations import format_duration

#: kinds a watch may not sit on: interrupting a compose call half sent leaves the host unknown
UNWATCHABLE = ("down", "up", "dry_run")


class WatchRelay(_Strict):
    token_variable: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    port: int = Field(gt=0, lt=65536)


class WatchSpec(_Strict):
    replica: str = Field(min_length=1)
    relay: WatchRelay
    poll: Seconds
    window: Seconds
    min_samples: int = Field(default=20, ge=1)
    max: dict[str, float] = Field(default_factory=lambda: {})
    min: dict[str, float] = Field(default_factory=lambda: {})
    #: a watched metric the replica's /metrics does not carry: fail the step (default) or note it and go on
    on_unknown: Literal["fail", "note"] = "fail"

    @model_validator(mode="after")
    def _sound(self) -> WatchSpec:
        check_poll("watch.", "window", self.window, self.poll, "increase")
        if not self.max and not self.min:
            raise ValueError("a watch needs max: or min: (a metric and its bound)")
        for m in [*self.max, *self.min]:
            d = METRICS.get(m)
            if d is None:
                raise ValueError(f"watch: unknown metric {m!r}: one of {', '.join(METRICS)}")
            if d.origin != "engine":
                raise ValueError(f"watch: {m} is not on the replica's own /metrics (a watch reads its relay route only)")
        return self

    def bounds(self) -> list[tuple[str, float | None, float | None]]:
        """(metric, lowest allowed, highest allowed) per watched metric."""
        return [(m, None, v) for m, v in self.max.items()] + [(m, v, None) for m, v in self.min.items()]

    def describe(self) -> str:
        parts = [f"{m} <= {v:g}" for m, v in self.max.items()] + [f"{m} >= {v:g}" for m, v in self.min.items()]
        return (f"while it runs, {self.replica} is watched through relay :{self.relay.port} every "
                f"{format_duration(self.poll)} over a sliding {format_duration(self.window)} "
                f"(rates judged from {self.min_samples} requests): {', '.join(parts)}; a breach stops the step "
                f"and fails it; a metric {self.replica}'s /metrics does not carry is unknown, never within bounds: "
                + ("it fails the step" if self.on_unknown == "fail" else "it is noted and not watched"))


def check_watch(here: str, kind: str, spec: WatchSpec, replicas: dict[str, list[str]]) -> None:
    """The loader's cross-checks: a replica of the runbook; never on a compose call."""
    if kind in UNWATCHABLE:
        raise ValueError(f"{here}: watch: cannot sit on a {kind} step (a compose call stopped half sent leaves "
                         f"the host unknown); put it on the logs/soak/analysis step that follows")
    if replicas and spec.replica not in replicas:
        raise ValueError(f"{here}: watch.replica {spec.replica!r} is not a replica of the runbook ({', '.join(replicas)})")
