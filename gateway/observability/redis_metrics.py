"""Metrics of limits shared in Redis (gateway/shared_limits): round trips, failures, the
fallback's state and the admissions it made. Label values are the closed set `REDIS_OPS`."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

from gateway.observability.histogram import LoopHistogram
from gateway.observability.labels import OTHER

# Seconds: one Redis call, 100 us .. 1 s.
REDIS_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                 0.25, 0.5, 1.0)  # fmt: skip
REDIS_OPS = ("reserve", "settle", "refresh", "heartbeat")


class RedisMetrics:
    def __init__(self, r: CollectorRegistry) -> None:
        self._rtt = LoopHistogram(
            "shardgate_redis_round_trip_seconds",
            "Shared limits: one Redis call (reserve, settle, refresh, heartbeat).",
            ["op"],
            REDIS_BUCKETS,
        )
        r.register(self._rtt)
        self._rtt_by_op = {op: self._rtt.labels(op) for op in REDIS_OPS}
        self._state = Gauge(
            "shardgate_redis_fallback",
            "Shared limits: 0 in Redis, 1 probing Redis again, 2 local fallback (Redis away).",
            registry=r,
        )
        self._fallback = Counter(
            "shardgate_redis_fallback_admissions",
            "Requests decided by the local fallback limits while Redis was away.",
            ["outcome"],
            registry=r,
        )
        for outcome in ("admitted", "rejected"):
            self._fallback.labels(outcome)
        self._errors = Counter(
            "shardgate_redis_errors", "Redis calls that failed or timed out.", ["op"], registry=r
        )
        for op in REDIS_OPS:
            self._errors.labels(op)
        self._dropped = Counter(
            "shardgate_redis_settles_dropped",
            "Settlements not sent (Redis away, or the queue full); leases expire by themselves.",
            registry=r,
        )

    def round_trip(self, op: str, seconds: float) -> None:
        child = self._rtt_by_op.get(op)
        if child is not None:
            child.observe(seconds)

    def error(self, op: str) -> None:
        self._errors.labels(op if op in REDIS_OPS else OTHER).inc()

    def fallback_admission(self, admitted: bool) -> None:
        self._fallback.labels("admitted" if admitted else "rejected").inc()

    def settles_dropped(self, n: int) -> None:
        self._dropped.inc(n)

    def register_state(self, callback: Callable[[], int]) -> None:
        """`callback()` -> the breaker's state (gateway/policy/breaker.py), read at scrape."""
        self._state.set_function(callback)
