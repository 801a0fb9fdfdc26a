"""A circuit breaker over a remote dependency, on an injected clock.

Closed: every call goes through; `failures` failures in a row open it. Open: no call goes
through for `cooldown_s`; then it is half-open and lets one probe through. The probe's success
closes it; its failure opens it again for twice as long (up to `max_cooldown_s`). A probe that
reports nothing within the cooldown (its caller went away) lets another probe through.
"""

from __future__ import annotations

import enum


class BreakerState(enum.IntEnum):
    """The value of the `shardgate_redis_fallback` gauge."""

    CLOSED = 0
    HALF_OPEN = 1
    OPEN = 2


class Breaker:
    __slots__ = (
        "_base_s",
        "_cooldown_s",
        "_failures",
        "_max_s",
        "_probe_at",
        "_until",
        "state",
        "threshold",
    )

    def __init__(self, failures: int = 3, cooldown_s: float = 0.5, max_cooldown_s: float = 5.0):
        if failures < 1 or cooldown_s <= 0 or max_cooldown_s < cooldown_s:
            raise ValueError("failures >= 1 and 0 < cooldown_s <= max_cooldown_s")
        self.threshold = failures
        self._base_s = self._cooldown_s = cooldown_s
        self._max_s = max_cooldown_s
        self._failures = 0
        self._until = 0.0
        self._probe_at = 0.0
        self.state = BreakerState.CLOSED

    def allow(self, now: float) -> bool:
        """May a call go to the dependency now? (In half-open state: the probe, once.)"""
        if self.state is BreakerState.CLOSED:
            return True
        if self.state is BreakerState.OPEN:
            if now < self._until:
                return False
            self.state = BreakerState.HALF_OPEN
        elif now < self._probe_at + self._cooldown_s:
            return False  # a probe is out
        self._probe_at = now
        return True

    def success(self, now: float) -> None:
        self.state = BreakerState.CLOSED
        self._failures = 0
        self._cooldown_s = self._base_s

    def failure(self, now: float) -> None:
        if self.state is BreakerState.OPEN:
            return  # a call that started before it opened
        if self.state is BreakerState.HALF_OPEN:
            self._cooldown_s = min(self._cooldown_s * 2, self._max_s)
            self._open(now)
            return
        self._failures += 1
        if self._failures >= self.threshold:
            self._open(now)

    def _open(self, now: float) -> None:
        self.state = BreakerState.OPEN
        self._until = now + self._cooldown_s
        self._failures = 0
