"""One gateway link on the sidecar: read submits/aborts, write batched deltas and heartbeats.

The session is the same whatever carries it (the gRPC Link stream or the TCP link): it takes
(submits, aborts) pairs and yields `Batch`es that the transport encodes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import NamedTuple

from shardgate.v1 import engine_pb2 as pb

from engine_sidecar import convert
from engine_sidecar.backend import EngineDelta, EngineRequest, Finish, LoadSnapshot, RequestError
from engine_sidecar.hub import Hub, Outbox
from engine_sidecar.kv_mirror import KvMirror, KvView
from gateway import tasks

log = logging.getLogger(__name__)

# What the gateway sends, decoded by the transport: (link key, request) pairs and aborted keys.
Requests = AsyncIterator[tuple[Sequence[tuple[int, EngineRequest]], Sequence[int]]]


class Batch(NamedTuple):
    """One message to the gateway: deltas under link-local keys, a heartbeat's load report,
    on the first message only, the sidecar's announcement, and the engine's KV cache changes."""

    items: list[tuple[int, EngineDelta]]
    load: pb.LoadReport | None = None
    info: pb.InfoReply | None = None
    kv: pb.KvEvents | None = None


class LinkSession:
    """Owns one Link stream: a reader task and the writer loop (the handler itself)."""

    def __init__(
        self,
        hub: Hub,
        info: Callable[[], pb.InfoReply],
        load: Callable[[], LoadSnapshot],
        heartbeat_interval_s: float,
        max_pending: int,
        heartbeats_enabled: Callable[[], bool],
        registry: set[LinkSession] | None = None,
        kv: KvMirror | None = None,
    ) -> None:
        self._hub = hub
        self._info = info
        self._load = load
        self._interval = heartbeat_interval_s
        self._heartbeats_enabled = heartbeats_enabled
        self.box = Outbox(max_pending)
        self._errors: list[tuple[int, EngineDelta]] = []
        self._beat_due = True
        self._seq = 0
        self._closed = False
        self._registry = registry
        self._announce: pb.InfoReply | None = None  # a new announcement not yet sent
        self._kv_mirror = kv
        self._kv: KvView | None = None

    def announce(self, info: pb.InfoReply) -> None:
        """Send `info` (what the sidecar serves changed) with the next message, ahead of any
        delta it carries."""
        self._announce = info
        self.box.wake()

    def close(self) -> None:
        """End the link from this side (its requests are aborted; the gateway reconnects)."""
        self._closed = True
        self.box.wake()

    async def run(self, requests: Requests) -> AsyncIterator[Batch]:
        if self._registry is not None:
            self._registry.add(self)
        if self._kv_mirror is not None:
            self._kv = self._kv_mirror.view(self.box.wake)
        started: list[asyncio.Task[None]] = []
        try:
            # (read once registered: no announcement and no KV change is missed; inside the
            # try, so that a link that ends at its first message leaves nothing behind)
            yield Batch([], self._report(), self._info(), self._kv.take() if self._kv else None)
            started.append(asyncio.create_task(self._read(requests)))
            started.append(asyncio.create_task(self._tick()))
            while True:
                await self.box.wait()
                if self._closed:
                    return
                if self.box.overflowed:
                    log.warning("link dropped: the gateway stopped reading")
                    return
                out = self.build()
                if out is not None:
                    yield out
        finally:
            if self._kv is not None:
                self._kv.close()
            if self._registry is not None:
                self._registry.discard(self)
            await tasks.stop_all(started)
            self._hub.release(self.box)

    @property
    def closed(self) -> bool:
        return self._closed or self.box.overflowed

    def build(self) -> Batch | None:
        """The next message: what is pending (None: nothing is)."""
        items = self.box.take()
        if self._errors:
            items.extend(self._errors)
            self._errors = []
        load = None
        if self._beat_due:
            self._beat_due = False
            if self._heartbeats_enabled():
                load = self._report()
        info, self._announce = self._announce, None
        kv = self._kv.take() if self._kv is not None else None
        if items or load is not None or info is not None or kv is not None:
            return Batch(items, load, info, kv)
        return None

    def _report(self) -> pb.LoadReport:
        self._seq += 1
        report = pb.LoadReport()
        convert.fill_load(report, self._seq, self._load(), self._hub.inflight)
        return report

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            self._beat_due = True
            self.box.wake()

    async def _read(self, requests: Requests) -> None:
        try:
            async for submits, aborts in requests:
                for key in aborts:
                    self._hub.abort(self.box, key)
                for key, request in submits:
                    self._submit(key, request)
        except OSError as e:
            log.info("link: the gateway went away: %s", str(e) or type(e).__name__)
        except Exception as e:
            log.warning("link: bad request stream: %s", str(e) or type(e).__name__)
        finally:
            # The gateway closed its side (or the stream broke): end the link.
            self._closed = True
            self.box.wake()

    def _submit(self, key: int, request: EngineRequest) -> None:
        try:
            self._hub.submit(self.box, key, request)
        except RequestError as e:
            error = EngineDelta(
                key,
                [],
                "",
                Finish.ERROR,
                error_code=e.code,
                error_message=e.message,
                error_field=e.field,
            )
            self._errors.append((key, error))
            self.box.wake()
