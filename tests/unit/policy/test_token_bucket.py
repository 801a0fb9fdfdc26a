from __future__ import annotations

import math

import pytest

from gateway.policy.token_bucket import TokenBucket

T0 = 1000.0


def test_starts_full_and_takes_its_burst() -> None:
    b = TokenBucket(2, 2.0, T0)
    assert b.level(T0) == 2
    assert b.try_take(1, T0) and b.try_take(1, T0)
    assert not b.try_take(1, T0)
    assert b.level(T0) == pytest.approx(0)


@pytest.mark.parametrize(
    ("capacity", "rate", "elapsed", "level"),
    [
        (2, 2.0, 0.25, 0.5),
        (2, 2.0, 0.5, 1.0),
        (2, 2.0, 10.0, 2.0),  # never above capacity
        (4000, 4000 / 60, 30.0, 2000.0),
        (10, 0.5, 4.0, 2.0),
    ],
)
def test_refill(capacity: float, rate: float, elapsed: float, level: float) -> None:
    b = TokenBucket(capacity, rate, T0)
    assert b.try_take(capacity, T0)
    assert b.level(T0 + elapsed) == pytest.approx(level)


@pytest.mark.parametrize("start", [0.0, T0 + 0.123, 1e6 + 0.7, 3.3e7])
@pytest.mark.parametrize(
    ("capacity", "rate", "n"),
    [
        (2, 2.0, 1),  # 2 requests/s, burst 2
        (4000, 4000 / 60, 300),  # 4000 tokens/min
        (4000, 4000 / 60, 4000),
        (10, 0.5, 3),
        (1_000_000, 1_000_000 / 60, 1),
        (1, 1 / 60, 1),  # 1 per minute
    ],
)
def test_retrying_after_time_until_succeeds_and_a_bit_before_fails(
    start: float, capacity: float, rate: float, n: float
) -> None:
    b = TokenBucket(capacity, rate, start)
    assert b.try_take(capacity, start)
    wait = b.time_until(n, start)
    assert wait > 0
    assert not b.try_take(n, start + wait - 1e-3)
    assert b.try_take(n, start + wait)


def test_time_until() -> None:
    b = TokenBucket(10, 2.0, T0)
    assert b.time_until(10, T0) == 0
    assert math.isinf(b.time_until(11, T0))
    assert b.try_take(10, T0)
    assert b.time_until(3, T0) == pytest.approx(1.5)
    assert b.time_until_full(T0 + 1) == pytest.approx(4.0)


def test_charge_makes_a_debt_that_the_refill_pays() -> None:
    b = TokenBucket(10, 1.0, T0)
    b.charge(15, T0)
    assert b.level(T0) == pytest.approx(-5)
    assert b.time_until(1, T0) == pytest.approx(6)
    assert not b.try_take(1, T0 + 5.9)
    assert b.try_take(1, T0 + 6)


def test_give_back_is_capped_at_capacity() -> None:
    b = TokenBucket(10, 1.0, T0)
    assert b.try_take(4, T0)
    b.give_back(3, T0)
    assert b.level(T0) == pytest.approx(9)
    b.give_back(100, T0)
    assert b.level(T0) == 10


def test_a_clock_going_back_neither_refills_nor_drains() -> None:
    b = TokenBucket(10, 1.0, T0)
    assert b.try_take(10, T0)
    assert b.level(T0 - 5) == pytest.approx(0)
    assert b.level(T0 + 1) == pytest.approx(1)


@pytest.mark.parametrize(("capacity", "rate"), [(0, 1.0), (1, 0.0), (-1, 1.0)])
def test_bad_parameters(capacity: float, rate: float) -> None:
    with pytest.raises(ValueError):
        TokenBucket(capacity, rate, T0)
