"""The cyclic collector's pauses, timed with `gc.callbacks`.

Every collection stops the event loop for its whole length, so each one is a pause on the
hot path. `GcPauses` times them (start to stop, per generation) into a `HistogramChild` and
keeps the longest, and renders them at scrape time:

- `shardgate_gc_pause_seconds{generation}`: a histogram of collection times;
- `shardgate_gc_pause_max_seconds{generation}`: the longest since start-up;
- `shardgate_gc_cpu_seconds_total{generation}`: the CPU time they took (on a busy machine a
  pause can last longer than its CPU time: the process was not running);
- `shardgate_gc_collected_objects_total{generation}`: objects the collector freed.

`gc.callbacks` is one list per process: `install` adds this instance's callback, `uninstall`
takes it out again (a test may run several gateways in one process).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from gateway.observability.histogram import HistogramChild

PAUSE = "shardgate_gc_pause_seconds"
PAUSE_MAX = "shardgate_gc_pause_max_seconds"
CPU = "shardgate_gc_cpu_seconds_total"
COLLECTED = "shardgate_gc_collected_objects_total"

# Seconds: 20 µs .. 1 s; a young collection takes tens of microseconds, a full one of a big
# heap tens of milliseconds.
BUCKETS = (0.00002, 0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02,
           0.05, 0.1, 0.2, 0.5, 1.0)  # fmt: skip
GENERATIONS = (0, 1, 2)


class GcPauses(Collector):
    def __init__(
        self,
        clock: Callable[[], float] = time.perf_counter,
        cpu: Callable[[], float] = time.thread_time,
    ) -> None:
        self._clock = clock
        self._cpu = cpu
        self.pauses = [HistogramChild(BUCKETS) for _ in GENERATIONS]
        self.max_s = [0.0 for _ in GENERATIONS]
        self.cpu_s = [0.0 for _ in GENERATIONS]
        self.collected = [0 for _ in GENERATIONS]
        self._started = 0.0
        self._started_cpu = 0.0

    # -- the callback: two calls per collection ------------------------------------------------
    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started_cpu = self._cpu()
            self._started = self._clock()
            return
        took = self._clock() - self._started
        g = info["generation"]
        self.cpu_s[g] += self._cpu() - self._started_cpu
        self.pauses[g].observe(took)
        if took > self.max_s[g]:
            self.max_s[g] = took
        self.collected[g] += info["collected"]

    def install(self) -> None:
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def uninstall(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)

    # -- what a scrape reads ------------------------------------------------------------------
    @property
    def count(self) -> int:
        return sum(sum(h.counts) for h in self.pauses)

    def describe(self) -> Iterator[Metric]:
        return iter(self._families())

    def collect(self) -> Iterator[Metric]:
        pause, longest, cpu, collected = families = self._families()
        les = [repr(b) for b in BUCKETS]
        for g, h in zip(GENERATIONS, self.pauses, strict=True):
            cumulative, buckets = 0, []
            for le, n in zip(les, h.counts, strict=False):
                cumulative += n
                buckets.append((le, float(cumulative)))
            buckets.append(("+Inf", float(cumulative + h.counts[-1])))
            pause.add_metric([str(g)], buckets, h.sum)
            longest.add_metric([str(g)], self.max_s[g])
            cpu.add_metric([str(g)], self.cpu_s[g])
            collected.add_metric([str(g)], self.collected[g])
        return iter(families)

    @staticmethod
    def _families() -> tuple[
        HistogramMetricFamily, GaugeMetricFamily, CounterMetricFamily, CounterMetricFamily
    ]:
        return (
            HistogramMetricFamily(
                PAUSE,
                "Cyclic garbage collections, by generation: each stops the event loop.",
                labels=["generation"],
            ),
            GaugeMetricFamily(
                PAUSE_MAX,
                "The longest cyclic garbage collection since start-up, by generation.",
                labels=["generation"],
            ),
            CounterMetricFamily(
                CPU.removesuffix("_total"),
                "CPU time of the cyclic garbage collections, by generation.",
                labels=["generation"],
            ),
            CounterMetricFamily(
                COLLECTED.removesuffix("_total"),
                "Objects freed by the cyclic garbage collector, by generation.",
                labels=["generation"],
            ),
        )
