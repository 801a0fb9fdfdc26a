"""The engines' KV cache reports as the gateway holds them, read at scrape time."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.policy.routing.engine_cache import EngineCaches


class KvCollector(Collector):
    def __init__(self, caches: EngineCaches) -> None:
        self.caches = caches

    def describe(self) -> Iterator[Metric]:
        return iter(self._families(None))

    def collect(self) -> Iterator[Metric]:
        return iter(self._families(self.caches))

    @staticmethod
    def _families(c: EngineCaches | None) -> list[Metric]:
        blocks = GaugeMetricFamily(
            "shardgate_kv_index_blocks",
            "KV block names some engine reports it holds, in the gateway's index.",
        )
        guesses = GaugeMetricFamily(
            "shardgate_kv_index_guesses",
            "KV block names guessed for a replica just routed to, not yet confirmed.",
        )
        held = GaugeMetricFamily(
            "shardgate_kv_replica_blocks",
            "KV blocks each reporting sidecar's engine holds, as the index keeps them.",
            labels=["replica"],
        )
        events = CounterMetricFamily(
            "shardgate_kv_events", "KV block names stored or removed, applied to the index."
        )
        snapshots = CounterMetricFamily(
            "shardgate_kv_snapshots",
            "KV reports that replaced a sidecar's blocks whole: a link's first, or a resync "
            "after the sidecar lost track of what it told (pending overflow, an event gap).",
        )
        routed = CounterMetricFamily(
            "shardgate_kv_routed_requests",
            "Requests routed on the engines' KV reports (their prompt tokenized at the gateway).",
        )
        matched = CounterMetricFamily(
            "shardgate_kv_matched_tokens",
            "Prompt tokens of those requests cached on the replica chosen, and on the "
            "candidate that held the most.",
            labels=["on"],
        )
        if c is not None:
            stored, guessed = c.index.size()
            blocks.add_metric([], stored)
            guesses.add_metric([], guessed)
            for sidecar in sorted(c.block_sizes):
                held.add_metric([sidecar], c.index.blocks(sidecar))
            events.add_metric([], c.events)
            snapshots.add_metric([], c.snapshots)
            routed.add_metric([], c.matched_requests)
            matched.add_metric(["chosen"], c.chosen_tokens)
            matched.add_metric(["best"], c.best_tokens)
        return [blocks, guesses, held, events, snapshots, routed, matched]
