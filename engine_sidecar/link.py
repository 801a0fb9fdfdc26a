"""One gateway link on the sidecar: read submits/aborts, write batched deltas and heartbeats."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from shardgate.v1 import engine_pb2 as pb

from engine_sidecar import convert
from engine_sidecar.backend import LoadSnapshot, RequestError
from engine_sidecar.hub import Hub, Outbox

log = logging.getLogger(__name__)


class LinkSession:
    """Owns one Link stream: a reader task and the writer loop (the handler itself)."""

    def __init__(
        self,
        hub: Hub,
        info: pb.InfoReply,
        load: Callable[[], LoadSnapshot],
        heartbeat_interval_s: float,
        max_pending: int,
        heartbeats_enabled: Callable[[], bool],
    ) -> None:
        self._hub = hub
        self._info = info
        self._load = load
        self._interval = heartbeat_interval_s
        self._heartbeats_enabled = heartbeats_enabled
        self.box = Outbox(max_pending)
        self._errors: list[pb.Delta] = []
        self._beat_due = True
        self._seq = 0
        self._closed = False

    async def run(self, requests: AsyncIterator[pb.LinkRequest]) -> AsyncIterator[pb.LinkResponse]:
        first = pb.LinkResponse()
        first.info.CopyFrom(self._info)
        self._fill_load(first)
        yield first
        reader = asyncio.create_task(self._read(requests))
        ticker = asyncio.create_task(self._tick())
        try:
            while True:
                await self.box.wait()
                if self._closed:
                    return
                if self.box.overflowed:
                    log.warning("link dropped: the gateway stopped reading")
                    return
                out = self._build()
                if out.deltas or out.HasField("load"):
                    yield out
        finally:
            for task in (reader, ticker):
                task.cancel()
            for task in (reader, ticker):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            self._hub.release(self.box)

    def _build(self) -> pb.LinkResponse:
        out = pb.LinkResponse()
        for key, d in self.box.take():
            convert.add_delta(out, key, d)
        if self._errors:
            out.deltas.extend(self._errors)
            self._errors.clear()
        if self._beat_due:
            self._beat_due = False
            if self._heartbeats_enabled():
                self._fill_load(out)
        return out

    def _fill_load(self, out: pb.LinkResponse) -> None:
        self._seq += 1
        convert.fill_load(out.load, self._seq, self._load())

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            self._beat_due = True
            self.box.wake()

    async def _read(self, requests: AsyncIterator[pb.LinkRequest]) -> None:
        try:
            async for msg in requests:
                for key in msg.aborts:
                    self._hub.abort(self.box, key)
                for sub in msg.submits:
                    self._submit(sub)
        finally:
            # The gateway closed its side (or the stream broke): end the link.
            self._closed = True
            self.box.wake()

    def _submit(self, sub: pb.SubmitRequest) -> None:
        try:
            self._hub.submit(self.box, sub.key, convert.to_request(sub, 0))
        except RequestError as e:
            self._errors.append(
                pb.Delta(
                    key=sub.key,
                    finish=pb.FINISH_ERROR,
                    error_code=int(e.code),  # type: ignore[arg-type]
                    error_message=e.message,
                    error_field=e.field,
                )
            )
            self.box.wake()
