"""Retries before the first token, and migrations after it.

A request that fails before any token reached the client may be retried on a replica it has not
tried yet: at most `max_attempts` attempts per request, and only while the global retry budget
has room. The budget is Finagle's RetryBudget: every request deposits `budget_ratio` of a retry,
every retry withdraws one, deposits and withdrawals count for `budget_window_s`, and a reserve of
`min_retries_per_s` x `budget_window_s` retries is there whatever the traffic. So retries stay
below about ratio x requests + the floor, and a failing fleet is not hit by a retry storm.

A stream that already started and lost its replica is migrated (resumed elsewhere from prompt +
tokens so far) at most `max_migrations` times. Migrations do not draw on the retry budget: they
follow a replica's loss, not an error the retry could amplify, and each one is bounded per
request.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.config.routing import RetrySettings

_SCALE = 1000  # the budget counts in thousandths of a retry, so that sums are exact
_SLOTS = 10


class RetryBudget:
    """Finagle's token retry budget over a sliding window of `_SLOTS` buckets."""

    __slots__ = ("_buckets", "_deposit", "_epoch", "_reserve", "_width")

    def __init__(self, *, ratio: float, min_per_s: float, window_s: float, now: float) -> None:
        self._deposit = round(ratio * _SCALE)
        self._reserve = round(min_per_s * window_s * _SCALE)
        self._width = window_s / _SLOTS
        self._buckets = [0] * _SLOTS
        self._epoch = int(now // self._width)

    def deposit(self, now: float) -> None:
        """A request arrived (count each request once, not each attempt)."""
        self._add(now, self._deposit)

    def try_withdraw(self, now: float) -> bool:
        """Take one retry from the budget if there is one."""
        self._roll(now)
        if self._reserve + sum(self._buckets) < _SCALE:
            return False
        self._buckets[self._epoch % _SLOTS] -= _SCALE
        return True

    def available(self, now: float) -> int:
        """Retries the budget would allow now (a gauge for metrics)."""
        self._roll(now)
        return max(0, self._reserve + sum(self._buckets)) // _SCALE

    def _add(self, now: float, amount: int) -> None:
        self._roll(now)
        self._buckets[self._epoch % _SLOTS] += amount

    def _roll(self, now: float) -> None:
        epoch = int(now // self._width)
        steps = epoch - self._epoch
        if steps <= 0:  # same bucket (or a clock that went back: stay)
            return
        buckets = self._buckets
        for k in range(1, min(steps, _SLOTS) + 1):
            buckets[(self._epoch + k) % _SLOTS] = 0
        self._epoch = epoch


@dataclass(slots=True)
class Attempts:
    """One request's retry and migration bookkeeping."""

    tried: list[str] = field(default_factory=list)  # replica names, in order
    migrations: int = 0

    def record(self, replica: str) -> None:
        """A replica was chosen for this request (first attempt, retry or migration)."""
        self.tried.append(replica)


class RetryPolicy:
    __slots__ = ("budget", "settings")

    def __init__(self, settings: RetrySettings, now: float) -> None:
        self.settings = settings
        self.budget = RetryBudget(
            ratio=settings.budget_ratio,
            min_per_s=settings.min_retries_per_s,
            window_s=settings.budget_window_s,
            now=now,
        )

    def start(self, now: float) -> Attempts:
        """A new request: it pays into the budget; returns its bookkeeping."""
        self.budget.deposit(now)
        return Attempts()

    def may_retry(self, attempts: Attempts, first_token_sent: bool, now: float) -> bool:
        """Whether to retry after a failed attempt; True takes one retry from the budget.
        The retry goes to a replica not in `attempts.tried` (route with `exclude=`)."""
        if first_token_sent or len(attempts.tried) >= self.settings.max_attempts:
            return False
        return self.budget.try_withdraw(now)

    def may_migrate(self, attempts: Attempts) -> bool:
        """Whether a started stream that lost its replica may move; True counts the migration."""
        if attempts.migrations >= self.settings.max_migrations:
            return False
        attempts.migrations += 1
        return True
