"""`quiet:` (a low-traffic window, docs/runbook-language.md): a step that takes a replica down waits
until the live traffic of the replicas serving the long domain (their `sglang:num_requests_total`
through the relay, summed) is below `below_per_min` over the last `over`, or the UTC clock is inside
`or_between`; after `wait_at_most` it asks a human (`orchestrate approve RUN_ID`) and keeps waiting
for either. Pure: the loader's part and the arithmetic (orchestrator/engine/steps/quiet.py runs it).
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from orchestrator.analysis.spec import AnalysisRelay, Seconds, _Strict, check_poll
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
        check_poll("quiet.", "over", self.over, self.poll, "rate")
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
