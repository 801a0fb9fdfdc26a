"""Gauges read at scrape time from callbacks, so the hot path never updates them."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Protocol

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

HEARTBEAT_AGE = "shardgate_link_heartbeat_age_seconds"

HeartbeatAges = Callable[[], Mapping[str, float]]


class Linked(Protocol):
    @property
    def address(self) -> str: ...
    @property
    def last_heartbeat(self) -> float: ...  # time.monotonic() of its last load report; 0: none


def heartbeat_ages(links: Iterable[Linked]) -> dict[str, float]:
    """Seconds since each link's last load report, by sidecar address."""
    now = time.monotonic()
    return {link.address: now - link.last_heartbeat for link in links if link.last_heartbeat}


class CallbackCollector(Collector):
    def __init__(self) -> None:
        self.heartbeat_ages: HeartbeatAges | None = None

    def describe(self) -> Iterator[Metric]:
        return iter(self._families())

    def collect(self) -> Iterator[Metric]:
        families = self._families()
        (age,) = families
        if self.heartbeat_ages is not None:
            try:
                ages = self.heartbeat_ages()
            except Exception:
                log.exception("heartbeat age callback failed")
            else:
                for replica, seconds in ages.items():
                    age.add_metric([replica], seconds)
        return iter(families)

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                HEARTBEAT_AGE,
                "Seconds since the last message on each replica's link; grows while it is down.",
                labels=["replica"],
            ),
        )
