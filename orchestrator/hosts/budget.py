"""HiCache host-memory budgets: parse, resolve per replica and per rank, check that they fit.

Pure and exact: sizes are `int` bytes, percentages `Decimal`, nothing passes through `float`.
The rules (gpu02 runbook, "HiCache host-memory budget"): `SGLANG_HICACHE_RAM_BUDGET` is a
per-replica size (`406GiB`) or a percentage (`40%`) of `MemAvailable` when that replica's engine
starts (so it depends on start order); each TP rank gets `floor(replica_bytes / ranks)` and logs
it as `rank_budget_bytes=<int>`; the replicas must fit in the available RAM minus a reserve, with
room left for page cache.

Units: `KB MB GB TB` are powers of 1000, `KiB MiB GiB TiB` of 1024, `B` or none bytes;
case-sensitive, nothing else accepted (how the engine reads other spellings is not known here, so
a value we pass must be one whose meaning is certain).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Context, Decimal, Inexact, InvalidOperation, Rounded

GIB = 2**30

UNITS: dict[str, int] = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
}

_EXAMPLES = "use e.g. 406GiB, 435939180544, 1.5TiB, 500GB or 40%"
_NUMBER_UNIT = re.compile(r"(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[A-Za-z]+|%)?")
_MAX_DIGITS = 100  # room for 1 byte written exactly in TiB; keeps the arithmetic bounded

# Arithmetic that raises instead of rounding: a result that would not be exact is a bug.
_EXACT = Context(prec=200, traps=[Inexact, Rounded, InvalidOperation])


class BudgetError(ValueError):
    """A budget that cannot be used; the message says what to write instead."""


@dataclass(frozen=True)
class Budget:
    """One replica's budget: absolute `bytes` or a `percent` of available RAM (exactly one set,
    positive, a percentage at most 100: `parse_budget` makes every one); `text` as written."""

    text: str
    bytes: int | None = None
    percent: Decimal | None = None

    def resolve(self, available_bytes: int) -> int:
        """Bytes this budget books when `available_bytes` are available at its engine's start."""
        if self.bytes is not None:
            return self.bytes
        assert self.percent is not None
        numerator, denominator = self.percent.as_integer_ratio()
        return max(0, available_bytes) * numerator // (denominator * 100)


def parse_budget(text: str) -> Budget:
    """Parse `406GiB`, `406 GiB`, `435939180544`, `1.5TiB`, `500GB` or `40%`; anything else
    (zero, over 100%, not whole bytes, a wrongly-cased unit, ...) is refused saying what to write."""
    if not isinstance(text, str):
        raise BudgetError(f"budget {text!r} is not a string: {_EXAMPLES}")
    stripped = text.strip()
    if not stripped:
        raise BudgetError(f"budget is empty: {_EXAMPLES}")
    if stripped.startswith("-"):
        raise BudgetError(f"budget {text!r} is negative: a budget must be positive; {_EXAMPLES}")
    match = _NUMBER_UNIT.fullmatch(stripped)
    if match is None or len(match["number"]) > _MAX_DIGITS:
        raise BudgetError(f"budget {text!r} is not understood: {_EXAMPLES}")
    number = Decimal(match["number"])
    unit = match["unit"] or "B"
    if number == 0:
        raise BudgetError(f"budget {text!r} is zero: a budget must be positive; {_EXAMPLES}")
    if unit == "%":
        if number > 100:
            raise BudgetError(f"budget {text!r} is over 100%: a percentage is at most 100%")
        return Budget(text=text, percent=number)
    if unit not in UNITS:
        spelled = next((u for u in UNITS if u.lower() == unit.lower()), None)
        if spelled is not None:  # a unit written in the wrong case: say how it is spelled
            raise BudgetError(f"budget {text!r}: unit {unit!r} is spelled {spelled!r} "
                              f"(units are case-sensitive: {' '.join(UNITS)})")
        raise BudgetError(f"budget {text!r} is not understood: {_EXAMPLES}")
    value = _EXACT.multiply(number, Decimal(UNITS[unit]))
    if value != value.to_integral_value():
        raise BudgetError(f"budget {text!r} is {value} bytes, not a whole number of bytes: "
                          f"write it in a smaller unit or in bytes")
    return Budget(text=text, bytes=int(value))


def format_gib(n_bytes: int) -> str:
    """Bytes in GiB with one decimal, for humans: 435939180544 -> `406.0 GiB`."""
    value = _EXACT.divide(Decimal(n_bytes), Decimal(GIB))
    return f"{value.quantize(Decimal('0.1'), rounding=ROUND_HALF_EVEN)} GiB"


def per_rank_bytes(replica_bytes: int, ranks: int) -> int:
    """Each rank's share, floored: 406 GiB over 4 ranks = 108984795136."""
    if ranks < 1:
        raise BudgetError(f"ranks must be at least 1, not {ranks}")
    if replica_bytes < 0:
        raise BudgetError(f"replica budget must not be negative ({replica_bytes} bytes)")
    return replica_bytes // ranks


def resolve_in_start_order(budgets: Sequence[Budget], available_bytes: int) -> list[int]:
    """Bytes each replica books, in start order: a percentage of what the earlier replicas left
    (never below zero), an absolute size as asked even when it does not fit (`check_fit` says so)."""
    _require_non_negative(available_bytes=available_bytes)
    remaining = available_bytes
    booked: list[int] = []
    for budget in budgets:
        amount = budget.resolve(remaining)
        booked.append(amount)
        remaining = max(0, remaining - amount)
    return booked


@dataclass
class FitReport:
    ok: bool
    page_cache_headroom_bytes: int  # available - reserve - total; negative when it does not fit
    problems: list[str] = field(default_factory=list)


def check_fit(budgets: Sequence[Budget], available_bytes: int, reserve_bytes: int,
              min_page_cache_bytes: int = 0) -> FitReport:
    """Whether the replicas' budgets, started in the given order, fit on the host. Problems: the
    total exceeds available minus reserve (double-booking), too little page-cache headroom, a
    percentage on several replicas (it moves at every restart), percentages over 100% in sum
    (double-booking)."""
    _require_non_negative(available_bytes=available_bytes, reserve_bytes=reserve_bytes,
                          min_page_cache_bytes=min_page_cache_bytes)
    replica_bytes = resolve_in_start_order(budgets, available_bytes)
    total = sum(replica_bytes)
    usable = available_bytes - reserve_bytes
    headroom = usable - total
    percents = [b.percent for b in budgets if b.percent is not None]
    percent_sum = sum(percents, Decimal(0))
    problems: list[str] = []

    if len(budgets) > 1 and percents:
        shares = ", then ".join(format_gib(b) for b in replica_bytes)
        problems.append(
            f"percentage budgets on {len(budgets)} replicas depend on start order "
            f"({shares}) and move at every restart: give each replica a fixed size instead"
        )
    if percent_sum > 100:
        written = " + ".join(f"{p}%" for p in percents)
        problems.append(
            f"double-booking: percentage budgets {written} add up to {percent_sum}% of host RAM "
            f"(a single-replica percentage applied to {len(percents)} replicas)"
        )
    if total > usable:
        books = "1 replica's budget books" if len(budgets) == 1 else f"{len(budgets)} replicas' budgets book"
        problems.append(
            f"double-booking: {books} {format_gib(total)}, more than the "
            f"{format_gib(max(usable, 0))} left of {format_gib(available_bytes)} available after "
            f"the {format_gib(reserve_bytes)} reserve ({format_gib(-headroom)} over): "
            f"the engine started last fails at startup"
        )
    elif headroom < min_page_cache_bytes:
        problems.append(
            f"the replica budgets leave {format_gib(headroom)} for page cache, less than the "
            f"{format_gib(min_page_cache_bytes)} required: lower the budgets"
        )
    return FitReport(ok=not problems, page_cache_headroom_bytes=headroom, problems=problems)


def _require_non_negative(**values: int) -> None:
    for name, value in values.items():
        if value < 0:
            raise BudgetError(f"{name} must not be negative ({value})")
