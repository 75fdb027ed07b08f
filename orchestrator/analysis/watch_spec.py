"""`watch:` on a step: one replica's metrics watched while the step runs.

    - id: cold-start
      say: Follow r2's log until it is ready, while r1 (alone on the long domain) is watched
      logs: {service: model-sg-glm53-w4afp8-tp4-r2, budget: true}
      watch:
        replica: r1                 # the replica that serves while the step runs
        relay: {token_variable: PROXY_TOKEN, port: 8008}
        poll: 30s                   # a scrape of its /metrics this often
        window: 5m                  # rates over the last 5 minutes (a sliding window)
        min_samples: 20             # fewer requests in the window: the rates are not judged yet
        max: {error_rate: 0.02, queue_depth_max: 8}
        on_unknown: fail            # a watched metric r1's /metrics does not carry: fail (default) or note

Like Argo Rollouts' background analysis (a metric watched for the whole of a step, a failure
aborts the rollout), on a replica that is not the one being changed. A breach (a bound crossed on
enough traffic), or a replica whose metrics cannot be read 3 polls in a row, stops the step and
fails it: the phase's rollback follows. A watch never passes a step by itself: the step's own gate
decides. Pure: the loader's part only (orchestrator/engine/executor/watch.py runs it).

A watched metric whose series the replica's /metrics does not carry (a build without the abort
counter, a renamed gauge), or carries from only part of the window, is unknown, never "within
bounds". The rule, `on_unknown`:
- `fail` (the default): the step fails, naming the metric and the missing series. A watch exists
  because the watched replica carries the traffic alone while the step runs; a watch that cannot
  see is no protection, and the phase's rollback restores the capacity it was guarding. A reviewer
  reading "watched: error_rate <= 2 %" in the plan must be able to trust that it was watched.
- `note`: the run's log and its progress (terminal, notifications) say, once per metric, that it
  is not watched; the other metrics are watched as before. For a metric that is a nice-to-have on
  that replica.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from orchestrator.analysis.metric_defs import METRICS
from orchestrator.analysis.spec import Seconds, _Strict
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
        if self.poll <= 0:
            raise ValueError("watch.poll must be longer than 0 s")
        if self.window < self.poll:
            raise ValueError(f"watch.window ({format_duration(self.window)}) is shorter than watch.poll "
                             f"({format_duration(self.poll)}): it would hold one scrape, no increase")
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
