"""A histogram cheap enough to observe once per generated token.

prometheus_client's Histogram takes locks and walks its buckets on every observation (a few
microseconds). This one bisects into a plain list: the gateway records from its single event loop
thread, and scrapes run on the same loop, so no lock is needed. Rendered as a normal Prometheus
histogram (`_bucket{le=...}`, `_sum`, `_count`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector


class HistogramChild:
    """One label set's buckets; `observe` is the hot path."""

    __slots__ = ("_bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self._bounds, value)] += 1
        self.sum += value

    def observe_many(self, values: Iterable[float]) -> None:
        counts, bounds, total = self.counts, self._bounds, 0.0
        for v in values:
            counts[bisect.bisect_left(bounds, v)] += 1
            total += v
        self.sum += total


class LoopHistogram(Collector):
    """A labelled histogram for one event loop thread (not thread-safe by design)."""

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]
    ) -> None:
        bounds = tuple(float(b) for b in buckets)
        if not bounds or list(bounds) != sorted(set(bounds)) or bounds[-1] == float("inf"):
            raise ValueError(f"{name}: buckets must be finite, distinct and ascending")
        self.name = name
        self._doc = documentation
        self._labelnames = tuple(labelnames)
        self._bounds = bounds
        self._les = [repr(b) for b in bounds]  # as Go formats them: 0.005, 1.0, 60.0
        self._children: dict[tuple[str, ...], HistogramChild] = {}

    def labels(self, *values: str) -> HistogramChild:
        if len(values) != len(self._labelnames):
            raise ValueError(f"{self.name}: expected labels {self._labelnames}, got {values}")
        key = tuple(str(v) for v in values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = HistogramChild(self._bounds)
        return child

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self._doc, labels=self._labelnames)

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self._doc, labels=self._labelnames)
        for key, child in self._children.items():
            cumulative, buckets = 0, []
            for le, n in zip(self._les, child.counts, strict=False):
                cumulative += n
                buckets.append((le, float(cumulative)))
            buckets.append(("+Inf", float(cumulative + child.counts[-1])))
            family.add_metric(list(key), buckets, child.sum)
        yield family
