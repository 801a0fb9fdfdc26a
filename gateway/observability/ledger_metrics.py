"""The spend ledger's writer, read at scrape time: rows written, dropped (the store fell
behind by more than `store.max_pending_rows`), and waiting."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.runtime.ledger import Ledger


class LedgerCollector(Collector):
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def describe(self) -> Iterator[Metric]:
        return iter(self._families(None))

    def collect(self) -> Iterator[Metric]:
        return iter(self._families(self.ledger))

    @staticmethod
    def _families(ledger: Ledger | None) -> list[Metric]:
        written = CounterMetricFamily(
            "shardgate_ledger_rows_written", "Spend ledger rows written to the store."
        )
        dropped = CounterMetricFamily(
            "shardgate_ledger_rows_dropped",
            "Spend ledger rows dropped: the store was behind by more than its bound.",
        )
        pending = GaugeMetricFamily(
            "shardgate_ledger_rows_pending", "Spend ledger rows waiting to be written."
        )
        if ledger is not None:
            written.add_metric([], ledger.written)
            dropped.add_metric([], ledger.dropped)
            pending.add_metric([], ledger.pending)
        return [written, dropped, pending]
