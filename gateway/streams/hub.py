"""What the API edges share about kept streams: the store, the owner of detached producers,
the grace a detached producer gets, and the metrics."""

from __future__ import annotations

from collections.abc import Callable

from gateway.config.schema import GatewaySettings
from gateway.observability.stream_metrics import StreamMetrics
from gateway.streams.ask import kept
from gateway.streams.detached import Detached
from gateway.streams.policy import Limits
from gateway.streams.store import StreamLog, StreamStore

# The header of a streamed response that carries its stream id, or says it has none.
STREAM_ID_HEADER = "x-shardgate-stream-id"
NO_RESUME_HEADER = "x-shardgate-stream-resume"


class Streams:
    def __init__(
        self, settings: GatewaySettings, metrics: StreamMetrics | None = None, tag: str = ""
    ) -> None:
        """`tag`: the worker's, in the ids of its streams and responses (streams/owner.py)."""
        s = settings.streams
        self.tag = tag
        self.enabled = s.enabled
        self.grace_s = settings.detach_grace_s
        self.store = StreamStore(
            Limits(s.max_streams, s.max_bytes, s.retention_s),
            s.max_stream_events,
            s.max_stream_bytes,
            metrics,
            tag=tag,
        )
        self.metrics = metrics
        if metrics is not None:
            metrics.watch(self.store)
        self.detached = Detached()
        self.routes = settings.resumable_streams  # (reloaded with the settings)
        # A tenant's word on keeping its streams (None: it says nothing): the live tenants'.
        self.tenant_keeps: Callable[[str], bool | None] = lambda tenant: None

    def open(
        self,
        tenant: str,
        headers: dict[str, str],
        route: str,
        asked: bool | None = None,
        kind: str = "sse",
    ) -> StreamLog | None:
        """A new stream's log (its id in `headers`), or None: served without resume (not
        asked for, `asked` None: the request said nothing; or the store cannot keep it)."""
        if not kept(asked, self.tenant_keeps(tenant), route, self.routes):
            return None
        if not self.enabled:
            headers[NO_RESUME_HEADER] = "disabled"
            return None
        log = self.store.open(tenant, kind)
        if log is None:
            headers[NO_RESUME_HEADER] = "unavailable"
        else:
            headers[STREAM_ID_HEADER] = log.sid
        return log

    def resumed(self, api: str) -> None:
        if self.metrics is not None:
            self.metrics.resumed(api)
