"""`quiet:` (a low-traffic window): a swap waits for a quiet long domain.

While one replica of gpu02 is down, the long tier runs on one host's single replica: a step that
takes a replica down should start when the long domain is quiet. The step waits until the live
traffic of the replicas serving it (each replica's `sglang:num_requests_total` through its relay
route, summed) is below `below_per_min` over the last `over`, or the UTC clock is inside
`or_between`; after `wait_at_most` it asks a human (`orchestrate approve RUN_ID`, the soak's
approval; `--yes` approves) and keeps waiting for either.

    - id: wait-for-quiet
      say: Wait for a quiet long domain (under 10 requests a minute) or the 01:00-05:00 UTC window; after 2 h ask a human
      quiet:
        relay: {token_variable: PROXY_TOKEN, ports: {r1: 8008, r2: 8009}}
        below_per_min: 10
        over: 10m
        poll: 1m
        or_between: "01:00-05:00"
        wait_at_most: 2h

Pure: the loader's part and the arithmetic (orchestrator/engine/steps/quiet.py runs it).
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from orchestrator.analysis.spec import AnalysisRelay, Seconds, _Strict
from orchestrator.util.durations import format_duration

_HHMM = re.compile(r"^([01]\d|2[0-4]):([0-5]\d)$")


def _minutes(hhmm: str) -> int:
    m = _HHMM.match(hhmm)
    if not m or (m.group(1) == "24" and m.group(2) != "00"):
        raise ValueError(f"{hhmm!r} is not a time of day HH:MM (UTC)")
    return int(m.group(1)) * 60 + int(m.group(2))


def inside(between: str, minute_of_day: int) -> bool:
    """Whether `minute_of_day` (UTC) is inside "HH:MM-HH:MM"; a window may wrap midnight (22:00-04:00)."""
    start, end = (_minutes(x.strip()) for x in between.split("-", 1))
    if start <= end:
        return start <= minute_of_day < end
    return minute_of_day >= start or minute_of_day < end


class QuietSpec(_Strict):
    relay: AnalysisRelay
    below_per_min: float = Field(gt=0)
    over: Seconds
    poll: Seconds
    or_between: str | None = None
    wait_at_most: Seconds

    @field_validator("or_between")
    @classmethod
    def _window(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if "-" not in v:
            raise ValueError(f"or_between {v!r} is not HH:MM-HH:MM (UTC)")
        a, b = (x.strip() for x in v.split("-", 1))
        if _minutes(a) == _minutes(b):
            raise ValueError(f"or_between {v!r} is empty")
        return v

    @model_validator(mode="after")
    def _sound(self) -> QuietSpec:
        if self.poll <= 0:
            raise ValueError("quiet.poll must be longer than 0 s")
        if self.over < self.poll:
            raise ValueError(f"quiet.over ({format_duration(self.over)}) is shorter than quiet.poll "
                             f"({format_duration(self.poll)}): it would hold one scrape, no rate")
        if self.wait_at_most < self.over:
            raise ValueError(f"quiet.wait_at_most ({format_duration(self.wait_at_most)}) is shorter than quiet.over "
                             f"({format_duration(self.over)}): a human would be asked before the rate is known")
        return self

    def describe(self) -> str:
        return (f"live traffic on {', '.join(self.relay.ports)} (relay :"
                + "/:".join(str(p) for p in self.relay.ports.values())
                + f") below {self.below_per_min:g} requests/min over {format_duration(self.over)}"
                + (f", or the UTC clock inside {self.or_between}" if self.or_between else "")
                + f"; polled every {format_duration(self.poll)}; after {format_duration(self.wait_at_most)} "
                f"an operator runs `orchestrate approve RUN_ID` (or --yes), and either still ends the wait")
