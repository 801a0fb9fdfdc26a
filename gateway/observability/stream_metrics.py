"""The stream store's metrics: its size, evictions, streams it could not keep, resumes."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from gateway.streams.store import StreamStore

EVICTION_REASONS = ("expired", "room")
RESUME_APIS = ("http", "grpc")


class StreamMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self._bytes = Gauge(
            "shardgate_stream_store_bytes", "Bytes of events in the stream store.", registry=r
        )
        self._streams = Gauge(
            "shardgate_stream_store_streams", "Streams kept in the stream store.", registry=r
        )
        self._evictions = Counter(
            "shardgate_stream_evictions",
            "Streams evicted from the stream store, by reason.",
            ["reason"],
            registry=r,
        )
        self._unkept = Counter(
            "shardgate_stream_unkept",
            "Streams served without resume: the stream store was full.",
            registry=r,
        )
        self._resumes = Counter(
            "shardgate_stream_resumes",
            "Readers that reattached to a stream, by API.",
            ["api"],
            registry=r,
        )
        # (a full store evicts at every new stream: the children are looked up once)
        self._evicted = {reason: self._evictions.labels(reason) for reason in EVICTION_REASONS}
        for api in RESUME_APIS:
            self._resumes.labels(api)

    def watch(self, store: StreamStore) -> None:
        self._bytes.set_function(lambda: store.nbytes)
        self._streams.set_function(lambda: len(store.logs))

    def evicted(self, reason: str) -> None:
        (self._evicted.get(reason) or self._evicted["room"]).inc()

    def refused(self) -> None:
        self._unkept.inc()

    def resumed(self, api: str) -> None:
        self._resumes.labels(api if api in RESUME_APIS else "http").inc()
