"""A token bucket on an injected clock: `now` is a parameter of every call, in seconds."""

from __future__ import annotations

import math
from typing import Final

# Slack for float rounding: waiting exactly `time_until(n)` must make `try_take(n)` succeed.
_EPS: Final = 1e-6


class TokenBucket:
    """Holds up to `capacity` tokens (the burst), refilled at `rate_per_s`; starts full.

    The level may go below zero through `charge` (a debt paid back by the refill).
    """

    __slots__ = ("_level", "_stamp", "capacity", "capacity_text", "rate_per_s")

    def __init__(self, capacity: float, rate_per_s: float, now: float) -> None:
        if capacity <= 0 or rate_per_s <= 0:
            raise ValueError("capacity and rate_per_s must be positive")
        self.capacity = float(capacity)
        self.rate_per_s = float(rate_per_s)
        # For x-ratelimit-limit-* headers, formatted once.
        self.capacity_text = str(int(capacity)) if capacity == int(capacity) else str(capacity)
        self._level = self.capacity
        self._stamp = now

    def _refill(self, now: float) -> float:
        if now > self._stamp:
            level = self._level + (now - self._stamp) * self.rate_per_s
            self._level = level if level < self.capacity else self.capacity
            self._stamp = now
        return self._level

    def level(self, now: float) -> float:
        return self._refill(now)

    def try_take(self, n: float, now: float) -> bool:
        """Take `n` tokens if the bucket holds them; else take nothing."""
        if self._refill(now) + _EPS < n:
            return False
        self._level -= n
        return True

    def charge(self, n: float, now: float) -> None:
        """Take `n` tokens even if that leaves a debt."""
        self._refill(now)
        self._level -= n

    def give_back(self, n: float, now: float) -> None:
        """Return `n` unused tokens (never above capacity)."""
        level = self._refill(now) + n
        self._level = level if level < self.capacity else self.capacity

    def time_until(self, n: float, now: float) -> float:
        """Seconds until `try_take(n)` can succeed: 0 now, `inf` if `n` exceeds the capacity."""
        if n > self.capacity:
            return math.inf
        level = self._refill(now)
        missing = n - level
        if missing <= _EPS:
            return 0.0
        # The first instant at which try_take sees enough, float rounding included.
        stamp, rate = self._stamp, self.rate_per_s
        at = stamp + missing / rate
        while level + (at - stamp) * rate + _EPS < n:
            at = math.nextafter(at, math.inf)
        return at - now

    def time_until_full(self, now: float) -> float:
        return (self.capacity - self._refill(now)) / self.rate_per_s
