"""Discovery's metrics, read at scrape time: the set's size by state, staleness, errors."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.discovery.runner import Discovery
from gateway.policy.discovery import MemberState

SIDECARS = "shardgate_discovery_sidecars"
STALE = "shardgate_discovery_stale"
SYNC_AGE = "shardgate_discovery_sync_age_seconds"
ERRORS = "shardgate_discovery_errors"


class DiscoveryCollector(Collector):
    def __init__(self, discovery: Discovery) -> None:
        self.discovery = discovery

    def describe(self) -> Iterator[Metric]:
        return iter(self._families())

    def collect(self) -> Iterator[Metric]:
        d = self.discovery
        sidecars, stale, age, errors = families = self._families()
        for state in MemberState:
            n = sum(1 for m in d.members.values() if m.state is state)
            sidecars.add_metric([state.value], n)
        stale.add_metric([], 1.0 if d.stale else 0.0)
        seconds = d.age_s()
        if seconds is not None:
            age.add_metric([], seconds)
        for kind, count in d.errors.items():
            errors.add_metric([kind.value], count)
        return iter(families)

    @staticmethod
    def _families() -> tuple[
        GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, CounterMetricFamily
    ]:
        return (
            GaugeMetricFamily(
                SIDECARS, "Discovered sidecars, routable or draining.", labels=["state"]
            ),
            GaugeMetricFamily(
                STALE,
                "1 while discovery failed since its last complete view (the last set stays).",
            ),
            GaugeMetricFamily(SYNC_AGE, "Seconds since discovery's last complete view."),
            CounterMetricFamily(ERRORS, "Discovery failures, by kind.", labels=["kind"]),
        )
