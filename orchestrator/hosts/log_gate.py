"""The cold-start log gate, pure: feed it engine log lines, ask whether it passed or failed.

It passes when every rank TP0..TP{n-1} logged each `required_per_rank` pattern (its
`{rank_budget_bytes}` filled in) and each `required` line. It fails at once on a `forbidden`
substring, or a rank's `rank_budget_bytes=` of another value (both numbers shown: they derive from
the budget, not from an env-map value).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_RANK = re.compile(r"\bTP(\d+)\]")
_BUDGET = re.compile(r"rank_budget_bytes=(\d+)")


@dataclass
class LogGateResult:
    passed: bool = False
    failed: bool = False
    reason: str = ""
    #: the line that decided it, or the last milestone seen
    line: str = ""


@dataclass
class LogGate:
    ranks: int
    required_per_rank: list[str]
    required: list[str]
    forbidden: list[str]
    #: None: do not check rank_budget_bytes values (a rollback to an engine with another budget).
    expected_rank_budget: int | None = None
    seen: dict[str, set[int]] = field(default_factory=dict)
    seen_once: set[str] = field(default_factory=set)
    result: LogGateResult = field(default_factory=LogGateResult)

    def __post_init__(self) -> None:
        # A rollback target (no expected budget) is checked for its ready line and failure signs
        # only: its budget and HiCache milestones are not this runbook's to judge.
        budget = self.expected_rank_budget
        self.required_per_rank = ([p.replace("{rank_budget_bytes}", str(budget)) for p in self.required_per_rank]
                                  if budget is not None else [])
        self.seen = {p: set() for p in self.required_per_rank}

    def feed(self, line: str) -> LogGateResult:
        if self.result.passed or self.result.failed:
            return self.result
        for bad in self.forbidden:
            if bad in line:
                self.result = LogGateResult(failed=True, reason=f"forbidden log line ({bad})", line=line.strip())
                return self.result
        rank_m = _RANK.search(line)
        rank = int(rank_m.group(1)) if rank_m else None
        if self.expected_rank_budget is not None:
            bm = _BUDGET.search(line)
            if bm and int(bm.group(1)) != self.expected_rank_budget:
                who = f"TP{rank}" if rank is not None else "a rank"
                reason = f"{who} logged rank_budget_bytes={bm.group(1)}, expected {self.expected_rank_budget}"
                self.result = LogGateResult(failed=True, reason=reason, line=line.strip())
                return self.result
        for pattern, ranks in self.seen.items():
            if pattern in line and rank is not None and rank < self.ranks:
                ranks.add(rank)
                self.result.line = line.strip()
        for pattern in self.required:
            if pattern in line:
                self.seen_once.add(pattern)
                self.result.line = line.strip()
        if all(len(r) == self.ranks for r in self.seen.values()) and all(p in self.seen_once for p in self.required):
            self.result = LogGateResult(passed=True, reason="every rank logged its milestones and the ready line", line=line.strip())
        return self.result

    @property
    def progressed(self) -> bool:
        """A milestone or the ready line was seen: lines an engine logs only after its start."""
        return bool(self.seen_once) or any(self.seen.values())

    def missing(self) -> list[str]:
        out = []
        for p, r in self.seen.items():
            lacking = sorted(set(range(self.ranks)) - r)
            if lacking:
                out.append(f"{p!r} from " + ", ".join(f"TP{i}" for i in lacking))
        out.extend(repr(p) for p in self.required if p not in self.seen_once)
        return out
