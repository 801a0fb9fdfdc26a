"""Gauges read at scrape time from callbacks, so the hot path never updates them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

HEARTBEAT_AGE = "shardgate_link_heartbeat_age_seconds"
POOL_IN_USE = "shardgate_buffer_pool_in_use"
POOL_CAPACITY = "shardgate_buffer_pool_capacity"
POOL_EXHAUSTED = "shardgate_buffer_pool_exhausted"


@dataclass(frozen=True, slots=True)
class BufferPoolUse:
    in_use: int
    capacity: int
    # Cumulative: buffers wanted while the pool was empty (allocated outside it).
    exhausted: int = 0


HeartbeatAges = Callable[[], Mapping[str, float]]
PoolReader = Callable[[], BufferPoolUse]


class CallbackCollector(Collector):
    def __init__(self) -> None:
        self.heartbeat_ages: HeartbeatAges | None = None
        self.pools: dict[str, PoolReader] = {}

    def describe(self) -> Iterator[Metric]:
        return iter(self._families())

    def collect(self) -> Iterator[Metric]:
        age, in_use, capacity, exhausted = families = self._families()
        if self.heartbeat_ages is not None:
            try:
                ages = self.heartbeat_ages()
            except Exception:
                log.exception("heartbeat age callback failed")
            else:
                for replica, seconds in ages.items():
                    age.add_metric([replica], seconds)
        for pool, read in self.pools.items():
            try:
                use = read()
            except Exception:
                log.exception("buffer pool %s callback failed", pool)
                continue
            in_use.add_metric([pool], use.in_use)
            capacity.add_metric([pool], use.capacity)
            exhausted.add_metric([pool], use.exhausted)
        return iter(families)

    @staticmethod
    def _families() -> tuple[
        GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, CounterMetricFamily
    ]:
        return (
            GaugeMetricFamily(
                HEARTBEAT_AGE,
                "Seconds since the last message on each replica's link; grows while it is down.",
                labels=["replica"],
            ),
            GaugeMetricFamily(POOL_IN_USE, "Buffers handed out.", labels=["pool"]),
            GaugeMetricFamily(POOL_CAPACITY, "Buffers preallocated.", labels=["pool"]),
            CounterMetricFamily(
                POOL_EXHAUSTED, "Buffers wanted while the pool was empty.", labels=["pool"]
            ),
        )
