from __future__ import annotations

import pytest

from gateway.config.routing import RetrySettings
from gateway.policy.retry import Attempts, RetryBudget, RetryPolicy


@pytest.mark.parametrize(
    ("ratio", "min_per_s", "requests", "retries"),
    [
        (0.2, 0.0, 100, 20),
        (0.2, 0.0, 4, 0),
        (0.5, 0.0, 10, 5),
        (0.0, 1.0, 1000, 10),  # only the floor: 1/s over a 10 s window
        (0.2, 1.0, 100, 30),
        (0.0, 0.0, 1000, 0),
    ],
)
def test_budget(ratio: float, min_per_s: float, requests: int, retries: int) -> None:
    b = RetryBudget(ratio=ratio, min_per_s=min_per_s, window_s=10.0, now=0.0)
    for _ in range(requests):
        b.deposit(1.0)
    assert b.available(1.0) == retries
    granted = sum(b.try_withdraw(2.0) for _ in range(retries + 10))
    assert granted == retries
    assert b.available(2.0) == 0


def test_budget_window_slides() -> None:
    b = RetryBudget(ratio=0.5, min_per_s=0.0, window_s=10.0, now=0.0)
    for _ in range(10):
        b.deposit(0.5)
    assert b.available(9.9) == 5
    assert b.available(10.5) == 0  # the deposits left the window
    for _ in range(2):
        b.deposit(11.0)
    assert b.try_withdraw(11.0)
    assert not b.try_withdraw(11.0)
    assert b.available(25.0) == 0
    for _ in range(2):
        b.deposit(25.0)
    assert b.try_withdraw(25.0)  # the old withdrawal left the window too


def test_budget_floor_refills_with_time() -> None:
    b = RetryBudget(ratio=0.0, min_per_s=0.5, window_s=10.0, now=0.0)
    assert sum(b.try_withdraw(1.0) for _ in range(10)) == 5
    assert not b.try_withdraw(10.5)
    assert b.try_withdraw(11.5)  # the withdrawals of t=1 are out of the window


def _policy(**kw: object) -> RetryPolicy:
    return RetryPolicy(RetrySettings(**kw), now=0.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("tried", "first_token_sent", "allowed"),
    [
        (["a"], False, True),
        (["a", "b"], False, True),
        (["a", "b", "c"], False, False),  # max_attempts 3, the first one included
        (["a"], True, False),  # the client already has tokens: migrate, do not retry
    ],
)
def test_may_retry(tried: list[str], first_token_sent: bool, allowed: bool) -> None:
    p = _policy(max_attempts=3)
    attempts = p.start(0.0)
    for name in tried:
        attempts.record(name)
    assert p.may_retry(attempts, first_token_sent, 0.0) is allowed


def test_retries_stop_when_the_budget_is_spent() -> None:
    p = _policy(budget_ratio=0.1, min_retries_per_s=0.0)
    results = []
    for _ in range(50):
        a = p.start(0.0)
        a.record("x")
        results.append(p.may_retry(a, False, 0.0))
    assert sum(results) == 5


@pytest.mark.parametrize(("max_migrations", "granted"), [(0, 0), (1, 1), (3, 3)])
def test_migration_limit(max_migrations: int, granted: int) -> None:
    p = _policy(max_migrations=max_migrations)
    a = Attempts(["x"])
    assert sum(p.may_migrate(a) for _ in range(5)) == granted
    assert a.migrations == granted
