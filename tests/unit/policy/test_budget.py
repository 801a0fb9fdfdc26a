from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.policy.budget import Budget, Duration, next_reset, parse_duration


def utc(*args: int) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("30s", Duration(30, "s")),
        ("15m", Duration(15, "m")),
        ("12h", Duration(12, "h")),
        ("30d", Duration(30, "d")),
        ("1mo", Duration(1, "mo")),
        (" 7d ", Duration(7, "d")),
    ],
)
def test_durations_parse(text: str, parsed: Duration) -> None:
    assert parse_duration(text) == parsed


@pytest.mark.parametrize(
    "text", ["", "0d", "monthly", "1w", "1.5h", "-1d", "d", "9999999s", "121mo", "3661d"]
)
def test_other_durations_are_refused_naming_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match=r"30d or 1mo|ten years"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("start", "duration", "after"),
    [
        (utc(2026, 1, 31, 12), "1mo", utc(2026, 2, 28, 12)),  # the month's last day
        (utc(2028, 1, 31), "1mo", utc(2028, 2, 29)),
        (utc(2026, 11, 15), "2mo", utc(2027, 1, 15)),
        (utc(2026, 12, 6), "1d", utc(2026, 12, 7)),
        (utc(2026, 12, 6), "90m", utc(2026, 12, 6, 1, 30)),
    ],
)
def test_one_duration_after(start: float, duration: str, after: float) -> None:
    assert parse_duration(duration).after(start) == after


def test_the_next_reset_skips_the_windows_that_passed() -> None:
    d = parse_duration("1h")
    assert next_reset(d, 0.0, 3600 * 5 + 1) == 3600 * 6
    assert next_reset(d, 0.0, 3600 * 5) == 3600 * 6  # (a reset due now is past)
    assert next_reset(d, 7200.0, 10.0) == 7200.0
    second = parse_duration("1s")  # idle for ten years: no loop over 3e8 windows
    assert next_reset(second, 0.5, 3e8) == 3e8 + 0.5
    assert next_reset(parse_duration("1mo"), utc(2026, 1, 15), utc(2026, 4, 20)) == utc(2026, 5, 15)


def test_a_budget_admits_while_spent_and_reserved_stay_below_it() -> None:
    b = Budget(1.0, None, None)
    assert b.allows(0)
    b.reserve(0.6)
    assert b.allows(0)  # 0.6 < 1.0: one more may go
    b.reserve(0.6)
    assert not b.allows(0)
    b.settle(0.6, 0.1, 0)
    b.settle(0.6, 0.2, 0)
    assert b.spent == pytest.approx(0.3) and b.reserved == 0
    assert b.allows(0)


def test_a_window_that_ends_starts_again_from_zero_and_says_so_once() -> None:
    b = Budget(1.0, parse_duration("1h"), 3600.0, spent=1.0)
    assert not b.allows(3599)
    assert b.allows(3600)
    assert b.spent == 0 and b.reset_at == 7200
    assert b.rolled == (3600.0, 7200.0)
    b.roll(8000)  # two rolls before the store heard of the first: it is told of both at once
    assert b.rolled == (3600.0, 10800.0)


def test_the_stores_figures_keep_what_is_settled_here_and_not_yet_written() -> None:
    b = Budget(10.0, None, None)
    b.settle(0.0, 2.0, 0)
    b.stored(5.0, None)  # another instance's spend, not this one's unwritten 2
    assert b.spent == 7.0
    b.written(2.0)
    b.stored(7.0, None)
    assert b.spent == 7.0


def test_a_store_behind_on_a_reset_does_not_undo_it() -> None:
    b = Budget(1.0, parse_duration("1h"), 3600.0, spent=0.9)
    b.roll(3700)
    b.stored(0.9, 3600.0)  # the reset is still queued for the store
    assert b.spent == 0 and b.reset_at == 7200


REQUESTS = st.lists(st.tuples(st.floats(0.0, 2.0), st.floats(0.0, 1.0)), max_size=60)


@given(REQUESTS, st.integers(1, 8))
def test_the_budget_is_passed_by_at_most_the_last_reserve(
    requests: list[tuple[float, float]], concurrent: int
) -> None:
    """Requests of a worst case `w` that cost a fraction of it, `concurrent` in flight."""
    b = Budget(5.0, None, None)
    flying: list[tuple[float, float]] = []
    worst = 0.0
    for w, part in requests:
        if len(flying) == concurrent:
            r, usd = flying.pop(0)
            b.settle(r, usd, 0)
        if b.allows(0):
            b.reserve(w)
            flying.append((w, w * part))
            worst = max(worst, w)
    for r, usd in flying:
        b.settle(r, usd, 0)
    assert b.spent <= 5.0 + worst + 1e-9
