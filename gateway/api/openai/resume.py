"""GET /v1/streams/{stream_id}: a client reattaches to a kept stream.

`Last-Event-ID: <stream_id>:<seq>` (or `?after=<seq>`; neither: from the start) names the last
event it has; it gets every kept event after that one, then the stream's new events as they
come, until the stream ends. Only the stream's tenant finds it (anyone else: 404); the events
before the oldest kept one are gone (410). One reader at a time: a new one replaces the one
before (that reader's response ends).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from gateway.api.openai import encode
from gateway.api.openai.sse import KEEPALIVE, SSE_HEADERS, SSEResponse
from gateway.policy.tenants import Tenants, bearer_key
from gateway.streams.hub import STREAM_ID_HEADER, Streams
from gateway.streams.sse import parse_last_event_id
from gateway.streams.store import REPLAY_BATCH, StreamLog
from gateway.types import GatewayError, InvalidRequest

# A write to a reattached client that stops reading gives up after this long.
WRITE_TIMEOUT_S = 30.0


class StreamNotFound(GatewayError):
    status = 404
    type = "not_found_error"


class StreamGone(GatewayError):
    status = 410
    type = "invalid_request_error"


class Follower:
    """A reattached reader: `replaced` when another one takes the stream."""

    __slots__ = ("gone",)

    def __init__(self) -> None:
        self.gone = False

    def replaced(self) -> None:
        self.gone = True


def after_of(request: web.Request, sid: str) -> int:
    """The sequence number the reader has (0: none)."""
    last = request.headers.get("Last-Event-ID")
    if last is not None:
        seq = parse_last_event_id(last, sid)
        if seq is None:
            raise InvalidRequest(f"Last-Event-ID must be {sid}:<seq>", "Last-Event-ID")
        return seq
    value = request.query.get("after")
    if value is None:
        return 0
    if not value.isdigit() or len(value) > 18:
        raise InvalidRequest("after must be a non-negative integer", "after")
    return int(value)


class Resume:
    def __init__(self, streams: Streams, tenants: Tenants, keepalive_s: float) -> None:
        self.streams = streams
        self.tenants = tenants
        self.keepalive_s = keepalive_s

    def find(self, sid: str, api_key: str | None, kind: str = "sse") -> StreamLog:
        tenant = self.tenants.resolve(api_key)
        log = self.streams.store.get(sid, tenant.name, kind)
        if log is None:
            raise StreamNotFound(f"No stream `{sid}`.", "stream_id")
        return log

    async def handle(self, request: web.Request) -> web.StreamResponse:
        sid = request.match_info["stream_id"]
        log = self.find(sid, bearer_key(request.headers.get("Authorization")))
        after = after_of(request, sid)
        events = log.since(after, REPLAY_BATCH)
        if events is None:
            raise StreamGone(
                f"Events up to {log.first - 1} of stream `{sid}` are no longer kept.", "after"
            )
        follower = Follower()
        log.attach(follower)
        self.streams.resumed("http")
        try:
            resp = SSEResponse(headers={**SSE_HEADERS, STREAM_ID_HEADER: sid})
            await resp.prepare(request)
            await self._follow(resp, log, follower, after, events)
        finally:
            log.detach(follower)
        return resp

    async def _follow(
        self,
        resp: web.StreamResponse,
        log: StreamLog,
        follower: Follower,
        after: int,
        events: list[bytes] | None,
    ) -> None:
        while True:
            if events is None:  # evicted under it
                gone = StreamGone(f"Stream `{log.sid}` is no longer kept.")
                await self._write(
                    resp, encode.ChunkEncoder.error_event(gone.message, gone.type, 410)
                )
                break
            if events:
                after += len(events)
                await self._write(resp, b"".join(events))
                if len(events) == REPLAY_BATCH:
                    await asyncio.sleep(0)  # (a long replay lets the loop run between batches)
            if follower.gone or (log.finished and after + 1 >= log.next_seq):
                break
            changed = log.changed()
            events = log.since(after, REPLAY_BATCH)
            if events == []:
                done, _ = await asyncio.wait({changed}, timeout=self.keepalive_s)
                if not done and not follower.gone:
                    await self._write(resp, KEEPALIVE)
                events = log.since(after, REPLAY_BATCH)
        async with asyncio.timeout(WRITE_TIMEOUT_S):
            await resp.write_eof()

    @staticmethod
    async def _write(resp: web.StreamResponse, data: bytes) -> None:
        async with asyncio.timeout(WRITE_TIMEOUT_S):
            await resp.write(data)
