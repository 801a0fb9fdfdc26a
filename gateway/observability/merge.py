"""One exposition from several workers' expositions (`shardgate gateway --workers N`).

Counters and histograms are the totals of all workers (each series summed, `_created`
timestamps the earliest). A gauge is combined by what it means:

- `shardgate_config_version`: the lowest, the version every worker has reached;
  `shardgate_config_info{hash}` is summed, so it counts the workers on each hash (all on
  one hash when they agree);
- `shardgate_replica_state`: the worst state any worker sees (down, then suspect, then
  ejected, then up), since each worker has its own link to every replica;
- `shardgate_link_heartbeat_age_seconds`: the oldest;
- `shardgate_tenant_budget_usd` (config, the same in every worker): the highest;
- `shardgate_discovery_*` gauges (each worker discovers the same set): the highest (the
  largest set, stale if any is, the oldest view);
- `shardgate_gc_pause_max_seconds`: the longest of any worker;
- any other gauge: summed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry

from gateway.observability.callbacks import HEARTBEAT_AGE
from gateway.observability.gc_pauses import PAUSE_MAX
from gateway.observability.labels import ReplicaState

__all__ = ["merge", "parse"]

Combine = Callable[[float, float], float]

# Lower is worse: how bad a replica state is, for the worst of several workers' views.
_BADNESS = {
    float(ReplicaState.DOWN): 0,
    float(ReplicaState.SUSPECT): 1,
    float(ReplicaState.EJECTED): 2,
    float(ReplicaState.UP): 3,
}


def _worst_state(a: float, b: float) -> float:
    return a if _BADNESS.get(a, -1) <= _BADNESS.get(b, -1) else b


def _sum(a: float, b: float) -> float:
    return a + b


GAUGES: dict[str, Combine] = {
    "shardgate_config_version": min,
    "shardgate_replica_state": _worst_state,
    HEARTBEAT_AGE: max,
    "shardgate_tenant_budget_usd": max,
    "shardgate_discovery_sidecars": max,
    "shardgate_discovery_stale": max,
    "shardgate_discovery_sync_age_seconds": max,
    PAUSE_MAX: max,
}


def _combine(family: Metric, sample: str) -> Combine:
    if sample.endswith("_created"):
        return min
    if family.type == "gauge":
        return GAUGES.get(family.name, _sum)
    return _sum


Key = tuple[str, tuple[tuple[str, str], ...]]


class _Merged(Collector):
    def __init__(self) -> None:
        self._families: dict[str, Metric] = {}
        self._values: dict[str, dict[Key, float]] = {}

    def add(self, families: Iterable[Metric]) -> None:
        for f in families:
            known = self._families.get(f.name)
            if known is None:
                self._families[f.name] = known = Metric(f.name, f.documentation, f.type, f.unit)
                self._values[f.name] = {}
            elif known.type != f.type:
                continue  # workers of one build agree on types; never mix two kinds
            values = self._values[f.name]
            for s in f.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                had = values.get(key)
                values[key] = s.value if had is None else _combine(f, s.name)(had, s.value)

    def collect(self) -> Iterator[Metric]:
        for name, family in self._families.items():
            out = Metric(family.name, family.documentation, family.type, family.unit)
            for (sample, labels), value in self._values[name].items():
                out.add_sample(sample, dict(labels), value)
            yield out


def parse(text: str) -> list[Metric]:
    """One exposition (Prometheus text format); ValueError when it is not one."""
    try:
        return list(text_string_to_metric_families(text))
    except (IndexError, KeyError, TypeError) as e:
        raise ValueError(f"not a Prometheus exposition: {e!r}") from e


def merge(workers: Sequence[Iterable[Metric]]) -> bytes:
    """Several workers' metric families as one exposition (text format)."""
    merged = _Merged()
    for families in workers:
        merged.add(families)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(merged)
    return generate_latest(registry)
