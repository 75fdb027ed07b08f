"""The HiCache startup host-memory budget rule the simulated engines follow.

`SGLANG_HICACHE_RAM_BUDGET` is a size (`406GiB`, `650GiB`, `500GB`, a byte count) or a
percentage (`80%`) of the host's available RAM *at the moment the engine starts*; the replica
budget is split evenly over its TP ranks (floor). It must leave a 10 GiB reserve, otherwise the
engine fails at startup.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

GIB = 1024**3
RESERVE_BYTES = 10 * GIB
TP_RANKS = 4

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1000**4,
    "tb": 1000**4,
    "tib": 1024**4,
}
_BUDGET = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%|[A-Za-z]*)\s*$")


class BudgetError(ValueError):
    pass


@dataclass(frozen=True)
class ResolvedBudget:
    text: str
    replica_bytes: int
    rank_bytes: int
    available_bytes: int

    @property
    def fits(self) -> bool:
        return self.replica_bytes <= self.available_bytes - RESERVE_BYTES


def resolve_budget(text: str, available_bytes: int, ranks: int = TP_RANKS) -> ResolvedBudget:
    m = _BUDGET.match(text)
    if m is None:
        raise BudgetError(f"invalid SGLANG_HICACHE_RAM_BUDGET {text!r}")
    number, unit = Decimal(m.group(1)), m.group(2).lower()
    if unit == "%":
        replica = int(Decimal(available_bytes) * number / 100)
    elif unit in _UNITS:
        replica = int(number * _UNITS[unit])
    else:
        raise BudgetError(f"invalid SGLANG_HICACHE_RAM_BUDGET {text!r}")
    return ResolvedBudget(
        text=text, replica_bytes=replica, rank_bytes=replica // ranks, available_bytes=available_bytes
    )
