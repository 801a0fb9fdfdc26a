"""The sidecar's /metrics, on its own port, with vLLM's metric names.

Everything is read at scrape time from a `LoadSnapshot` callable (a custom Collector), so the
engine loop pays nothing. Names follow vLLM's so dashboards built for vLLM work here:

    vllm:num_requests_running        gauge    requests in the running batch
    vllm:num_requests_waiting        gauge    requests waiting for a slot
    vllm:kv_cache_usage_perc         gauge    KV cache use, a fraction (1 = full), as vLLM does
    vllm:prefix_cache_hit_rate       gauge    prefix cache hits / queries, a fraction. vLLM v1
                                              exports counters (prefix_cache_queries/_hits);
                                              the snapshot holds only the ratio, so a gauge.
    vllm:num_preemptions_total       counter  requests the engine preempted
    vllm:generation_tokens_total     counter  tokens generated
    shardgate_sidecar_ready          gauge    1 while the engine takes requests
    shardgate_sidecar_max_num_seqs   gauge    the running batch's size limit
    shardgate_sidecar_links          gauge    open gateway links
    shardgate_sidecar_inflight       gauge    requests the sidecar is serving
    shardgate_sidecar_kv_blocks      gauge    prefix-cache blocks the engine reports it holds
    shardgate_sidecar_kv_clears_total  counter  times its whole cache was dropped (the engine's
                                              AllBlocksCleared, or a gap in its events)
    shardgate_sidecar_kv_replay_gaps_total  counter  gaps in the engine's KV events that its
                                              replay could not fill
    shardgate_sidecar_kv_resyncs_total  counter  links sent a snapshot again (they fell behind)

(the kv series only where the sidecar reports its engine's cache)

The vllm: series carry `model_name`, as vLLM's do.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Iterator

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from engine_sidecar.backend import LoadSnapshot
from engine_sidecar.kv_mirror import KvMirror

log = logging.getLogger(__name__)

Count = Callable[[], int]


class _SnapshotCollector(Collector):
    def __init__(
        self,
        load: Callable[[], LoadSnapshot],
        model_name: str,
        links: Count | None,
        inflight: Count | None,
    ) -> None:
        self._load = load
        self._model = [model_name]
        self._links = links
        self._inflight = inflight

    def describe(self) -> Iterator[Metric]:
        gauges, counters, plain = self._families()
        return iter([*gauges, *counters, *plain])

    def _families(
        self,
    ) -> tuple[list[GaugeMetricFamily], list[CounterMetricFamily], list[GaugeMetricFamily]]:
        m = ["model_name"]
        gauges = [
            GaugeMetricFamily("vllm:num_requests_running", "Requests running.", labels=m),
            GaugeMetricFamily("vllm:num_requests_waiting", "Requests waiting.", labels=m),
            GaugeMetricFamily("vllm:kv_cache_usage_perc", "KV cache use (1 = full).", labels=m),
            GaugeMetricFamily("vllm:prefix_cache_hit_rate", "Prefix cache hit rate.", labels=m),
        ]
        counters = [
            CounterMetricFamily("vllm:num_preemptions", "Requests preempted.", labels=m),
            CounterMetricFamily("vllm:generation_tokens", "Tokens generated.", labels=m),
        ]
        plain = [
            GaugeMetricFamily("shardgate_sidecar_ready", "1 while the engine takes requests."),
            GaugeMetricFamily("shardgate_sidecar_max_num_seqs", "Running batch size limit."),
        ]
        if self._links is not None:
            plain.append(GaugeMetricFamily("shardgate_sidecar_links", "Open gateway links."))
        if self._inflight is not None:
            plain.append(GaugeMetricFamily("shardgate_sidecar_inflight", "Requests in flight."))
        return gauges, counters, plain

    def collect(self) -> Iterator[Metric]:
        gauges, counters, plain = self._families()
        s = self._load()
        for family, value in zip(
            gauges, (s.running, s.waiting, s.kv_usage, s.prefix_hit_rate), strict=True
        ):
            family.add_metric(self._model, value)
        for counter, total in zip(counters, (s.preemptions, s.generated_tokens), strict=True):
            counter.add_metric(self._model, total)
        values = [float(s.ready), s.max_num_seqs]
        values += [read() for read in (self._links, self._inflight) if read is not None]
        for family, value in zip(plain, values, strict=True):
            family.add_metric([], value)
        yield from gauges
        yield from counters
        yield from plain


class _KvCollector(Collector):
    def __init__(self, kv: Callable[[], KvMirror | None]) -> None:
        self._kv = kv

    def describe(self) -> Iterator[Metric]:
        return iter(self._families())

    @staticmethod
    def _families() -> list[Metric]:
        return [
            GaugeMetricFamily("shardgate_sidecar_kv_blocks", "Prefix-cache blocks held."),
            CounterMetricFamily("shardgate_sidecar_kv_clears", "Whole-cache drops."),
            CounterMetricFamily(
                "shardgate_sidecar_kv_replay_gaps", "KV event gaps the replay did not fill."
            ),
            CounterMetricFamily("shardgate_sidecar_kv_resyncs", "Links sent a snapshot again."),
        ]

    def collect(self) -> Iterator[Metric]:
        mirror = self._kv()
        if mirror is None:
            return iter(())
        families = self._families()
        values = (len(mirror.held), mirror.clears, mirror.gaps, mirror.resyncs)
        for family, value in zip(families, values, strict=True):
            family.add_metric([], value)  # type: ignore[attr-defined]
        return iter(families)


class SidecarMetrics:
    """Serves GET /metrics on its own aiohttp server."""

    def __init__(
        self,
        load: Callable[[], LoadSnapshot],
        model_name: str,
        *,
        links: Count | None = None,
        inflight: Count | None = None,
        kv: Callable[[], KvMirror | None] | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_SnapshotCollector(load, model_name, links, inflight))
        if kv is not None:
            self.registry.register(_KvCollector(kv))
        self._runner: web.AppRunner | None = None

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    async def _metrics(self, request: web.Request) -> web.Response:
        body, content_type = self.render()
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def start(self, host: str, port: int, ssl_context: ssl.SSLContext | None = None) -> int:
        """Listen on host:port (0 picks a free port), over TLS with `ssl_context`; returns the
        bound port."""
        if self._runner is not None:
            raise RuntimeError("sidecar metrics already started")
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port, ssl_context=ssl_context).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        bound: int = runner.addresses[0][1]
        log.info("sidecar metrics on %s:%d", host, bound)
        return bound

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
