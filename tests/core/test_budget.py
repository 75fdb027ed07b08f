"""orchestrator.hosts.budget: parsing, per-rank shares, start-order resolution and the fit check.

Worked numbers come from the seed PR and the gpu02 runbook ("HiCache host-memory budget").
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.hosts.budget import (
    GIB,
    UNITS,
    Budget,
    BudgetError,
    check_fit,
    format_gib,
    parse_budget,
    per_rank_bytes,
    resolve_in_start_order,
)

GPU02_AVAILABLE = 1223 * GIB  # "about 1223 GiB available" (runbook)
RESERVE = 10 * GIB


# --- parse_budget -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("406GiB", 435_939_180_544),
        ("406 GiB", 435_939_180_544),
        ("  406GiB\n", 435_939_180_544),
        ("435939180544", 435_939_180_544),
        ("435939180544B", 435_939_180_544),
        ("1.5TiB", 1_649_267_441_664),
        ("500GB", 500_000_000_000),
        ("1KB", 1000),
        ("1KiB", 1024),
        ("2MB", 2_000_000),
        ("2MiB", 2 * 2**20),
        ("3TB", 3 * 10**12),
        ("650GiB", 650 * GIB),
        ("0.5KiB", 512),
        ("406.0GiB", 435_939_180_544),
    ],
)
def test_parse_absolute(text: str, expected: int) -> None:
    budget = parse_budget(text)
    assert budget.bytes == expected
    assert budget.percent is None
    assert budget.text == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [("40%", Decimal(40)), ("80%", Decimal(80)), ("12.5%", Decimal("12.5")), ("100%", Decimal(100)), ("40 %", Decimal(40))],
)
def test_parse_percent(text: str, expected: Decimal) -> None:
    budget = parse_budget(text)
    assert budget.bytes is None
    assert budget.percent == expected
    assert isinstance(budget.percent, Decimal)
    assert budget.bytes is None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("-406GiB", "negative"),
        ("-40%", "negative"),
        ("0", "zero"),
        ("0GiB", "zero"),
        ("0%", "zero"),
        ("0.0%", "zero"),
        ("101%", "over 100%"),
        ("100.01%", "over 100%"),
        ("1.3KiB", "not a whole number of bytes"),
        ("0.5", "not a whole number of bytes"),
        ("12 parsecs", "not understood"),
        ("GiB", "not understood"),
        ("406GiBx", "not understood"),
        ("4e2GiB", "not understood"),
        ("435,939,180,544", "not understood"),
        ("406 G", "not understood"),
        ("406Gi", "not understood"),
        ("406 Kb", "is spelled 'KB'"),
    ],
)
def test_parse_rejects_with_a_clear_message(text: str, fragment: str) -> None:
    with pytest.raises(BudgetError) as error:
        parse_budget(text)
    assert fragment in str(error.value)


def test_garbage_message_names_the_accepted_forms() -> None:
    with pytest.raises(BudgetError) as error:
        parse_budget("12 parsecs")
    assert str(error.value) == (
        "budget '12 parsecs' is not understood: use e.g. 406GiB, 435939180544, 1.5TiB, 500GB or 40%"
    )


@pytest.mark.parametrize(("text", "spelled"), [("406gib", "GiB"), ("406GIB", "GiB"), ("500gb", "GB"), ("1tib", "TiB")])
def test_units_are_case_sensitive_and_the_message_gives_the_spelling(text: str, spelled: str) -> None:
    # Decision: units are matched exactly as the compose files write them. A wrong case is refused,
    # naming the right spelling, so we never accept a value the engine might read differently.
    with pytest.raises(BudgetError) as error:
        parse_budget(text)
    assert f"is spelled {spelled!r}" in str(error.value)
    assert "case-sensitive" in str(error.value)


def test_budget_is_frozen_and_exactly_one_kind() -> None:
    budget = parse_budget("406GiB")
    with pytest.raises(AttributeError):
        budget.bytes = 1  # type: ignore[misc]
    assert (budget.bytes, budget.percent) == (406 * GIB, None)
    assert (parse_budget("40%").bytes, parse_budget("40%").percent) == (None, Decimal(40))


# --- formatting and round trips -----------------------------------------------------------------


def test_format_gib() -> None:
    assert format_gib(435_939_180_544) == "406.0 GiB"
    assert format_gib(0) == "0.0 GiB"
    assert format_gib(262_552_089_395) == "244.5 GiB"
    assert format_gib(-87 * GIB) == "-87.0 GiB"


@given(whole=st.integers(min_value=1, max_value=10**6), unit=st.sampled_from(sorted(UNITS)), spaced=st.booleans())
def test_whole_numbers_of_a_unit_parse_exactly(whole: int, unit: str, spaced: bool) -> None:
    text = f"{whole}{' ' if spaced else ''}{unit}"
    assert parse_budget(text).bytes == whole * UNITS[unit]


# --- per rank -----------------------------------------------------------------------------------


def test_seed_per_rank_numbers() -> None:
    replica = parse_budget("406GiB").bytes
    assert replica == 435_939_180_544
    assert per_rank_bytes(replica, 4) == 108_984_795_136


def test_old_r2_at_80_percent_relation() -> None:
    # gpu02's old r2 logged rank_budget_bytes=262552089395 at 80%. That is 80% of MemAvailable over
    # 4 ranks, so MemAvailable at its start was 262552089395 * 4 / 0.8 (give or take the floors).
    logged = 262_552_089_395
    available = logged * 4 * 100 // 80
    assert available * 80 == logged * 4 * 100  # exact: no rounding hides in this figure
    replica = resolve_in_start_order([parse_budget("80%")], available)[0]
    assert replica == logged * 4
    assert per_rank_bytes(replica, 4) == logged
    assert format_gib(logged) == "244.5 GiB"  # the runbook's "244.5 GiB per rank"
    # ...and that host figure is the runbook's "about 1223 GiB" (1222.6 GiB).
    assert format_gib(available) == "1222.6 GiB"


@given(replica=st.integers(min_value=0, max_value=2**50), ranks=st.integers(min_value=1, max_value=64))
def test_per_rank_share_property(replica: int, ranks: int) -> None:
    share = per_rank_bytes(replica, ranks)
    assert share * ranks <= replica
    assert share * ranks > replica - ranks


def test_per_rank_rejects_bad_input() -> None:
    with pytest.raises(BudgetError):
        per_rank_bytes(10, 0)
    with pytest.raises(BudgetError):
        per_rank_bytes(-1, 4)


# --- start-order resolution ---------------------------------------------------------------------


def test_forty_percent_on_gpu02_resolves_489_then_293() -> None:
    first, second = resolve_in_start_order([parse_budget("40%")] * 2, GPU02_AVAILABLE)
    assert format_gib(first) == "489.2 GiB"
    assert format_gib(second) == "293.5 GiB"
    assert first == GPU02_AVAILABLE * 40 // 100
    assert second == (GPU02_AVAILABLE - first) * 40 // 100


def test_absolute_budgets_resolve_to_themselves() -> None:
    assert resolve_in_start_order([parse_budget("406GiB")] * 2, GPU02_AVAILABLE) == [435_939_180_544] * 2


def test_mixed_absolute_then_percent() -> None:
    booked = resolve_in_start_order([parse_budget("406GiB"), parse_budget("50%")], GPU02_AVAILABLE)
    assert booked == [406 * GIB, (1223 - 406) * GIB // 2]


percents = st.decimals(min_value=Decimal("0.01"), max_value=Decimal(100), places=2)
availables = st.integers(min_value=0, max_value=2**42)


@given(ps=st.lists(percents, min_size=1, max_size=6), available=availables)
def test_percentages_never_book_more_than_available(ps: list[Decimal], available: int) -> None:
    booked = resolve_in_start_order([Budget(f"{p}%", percent=p) for p in ps], available)
    assert sum(booked) <= available
    assert all(b >= 0 for b in booked)


@given(
    sizes=st.lists(st.integers(min_value=1, max_value=2**38), min_size=0, max_size=3),
    ps=st.lists(percents, min_size=1, max_size=4),
    available=availables,
)
def test_percentages_after_fitting_absolutes_never_overbook(sizes: list[int], ps: list[Decimal], available: int) -> None:
    budgets = [Budget(str(s), bytes=s) for s in sizes] + [Budget(f"{p}%", percent=p) for p in ps]
    booked = resolve_in_start_order(budgets, available)
    assert booked[: len(sizes)] == sizes
    if sum(sizes) <= available:
        assert sum(booked) <= available


@given(p=percents, count=st.integers(min_value=2, max_value=6), available=availables)
def test_same_percent_later_replicas_never_get_more(p: Decimal, count: int, available: int) -> None:
    booked = resolve_in_start_order([Budget(f"{p}%", percent=p)] * count, available)
    assert all(later <= earlier for earlier, later in zip(booked, booked[1:]))


# --- fit ----------------------------------------------------------------------------------------


def test_gpu02_two_times_406_fits_leaving_about_401() -> None:
    report = check_fit([parse_budget("406GiB")] * 2, GPU02_AVAILABLE, RESERVE)
    assert report.ok
    assert report.problems == []
    assert not double_booked(report)
    assert report.page_cache_headroom_bytes == GPU02_AVAILABLE - RESERVE - 812 * GIB == 401 * GIB
    assert format_gib(report.page_cache_headroom_bytes) == "401.0 GiB"


def double_booked(report) -> bool:
    return any(p.startswith("double-booking:") for p in report.problems)


def test_gpu02_two_times_650_does_not_fit() -> None:
    report = check_fit([parse_budget("650GiB")] * 2, GPU02_AVAILABLE, RESERVE)
    assert not report.ok
    assert double_booked(report)
    assert report.page_cache_headroom_bytes == -87 * GIB
    assert report.problems == [
        "double-booking: 2 replicas' budgets book 1300.0 GiB, more than the 1213.0 GiB left of "
        "1223.0 GiB available after the 10.0 GiB reserve (87.0 GiB over): the engine started "
        "last fails at startup"
    ]


def test_page_cache_minimum_is_enforced() -> None:
    report = check_fit([parse_budget("406GiB")] * 2, GPU02_AVAILABLE, RESERVE, min_page_cache_bytes=402 * GIB)
    assert not report.ok
    assert not double_booked(report)
    assert report.problems == [
        "the replica budgets leave 401.0 GiB for page cache, less than the 402.0 GiB required: lower the budgets"
    ]
    assert check_fit([parse_budget("406GiB")] * 2, GPU02_AVAILABLE, RESERVE, 401 * GIB).ok


def test_eighty_percent_on_two_replicas_is_double_booking_by_percent_sum() -> None:
    # Resolved in start order the two fit (978.4 + 195.7 GiB < 1213 GiB): only the percentage sum
    # (160% of host RAM) reveals that a single-replica value was applied to two replicas.
    report = check_fit([parse_budget("80%")] * 2, GPU02_AVAILABLE, RESERVE)
    assert report.page_cache_headroom_bytes >= 0  # the bytes booked fit: only the percentages' sum gives it away
    assert double_booked(report)
    assert not report.ok
    assert report.problems == [
        "percentage budgets on 2 replicas depend on start order (978.4 GiB, then 195.7 GiB) and "
        "move at every restart: give each replica a fixed size instead",
        "double-booking: percentage budgets 80% + 80% add up to 160% of host RAM "
        "(a single-replica percentage applied to 2 replicas)",
    ]


def test_forty_percent_on_two_replicas_is_start_order_dependent_but_not_double_booked() -> None:
    report = check_fit([parse_budget("40%")] * 2, GPU02_AVAILABLE, RESERVE)
    assert not report.ok
    assert not double_booked(report)
    assert len(report.problems) == 1
    assert "depend on start order (489.2 GiB, then 293.5 GiB)" in report.problems[0]


def test_a_single_percentage_replica_is_fine_when_it_fits() -> None:
    report = check_fit([parse_budget("80%")], GPU02_AVAILABLE, RESERVE)
    assert report.ok and not double_booked(report)


def test_a_single_oversized_replica_is_reported_in_the_singular() -> None:
    report = check_fit([parse_budget("1300GiB")], GPU02_AVAILABLE, RESERVE)
    assert double_booked(report) and not report.ok
    assert report.problems[0].startswith("double-booking: 1 replica's budget books 1300.0 GiB")


def test_check_fit_rejects_negative_inputs() -> None:
    with pytest.raises(BudgetError):
        check_fit([], -1, 0)
    with pytest.raises(BudgetError):
        check_fit([], 1, -1)
    with pytest.raises(BudgetError):
        check_fit([], 1, 0, -1)


@given(
    sizes=st.lists(st.integers(min_value=1, max_value=2**41), min_size=1, max_size=4),
    available=st.integers(min_value=0, max_value=2**42),
    reserve=st.integers(min_value=0, max_value=2**35),
    headroom=st.integers(min_value=0, max_value=2**40),
)
def test_fit_ok_iff_total_within_available_minus_reserve_minus_headroom(
    sizes: list[int], available: int, reserve: int, headroom: int
) -> None:
    report = check_fit([Budget(str(s), bytes=s) for s in sizes], available, reserve, headroom)
    assert report.ok == (sum(sizes) <= available - reserve - headroom)
    assert report.ok == (report.problems == [])
    assert report.page_cache_headroom_bytes == available - reserve - sum(sizes)
    assert double_booked(report) == (sum(sizes) > available - reserve)
