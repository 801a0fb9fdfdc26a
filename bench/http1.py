"""A small HTTP/1.1 client over keep-alive connections, cheap enough to measure with.

Parsing runs in `data_received` (no task switch per read). The body goes to a `Sink` as it
arrives, with the time of the read, de-chunked; the caller awaits one future per response and
puts a deadline on it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol, cast

from bench.chunked import ChunkedDecoder, ChunkedError

MAX_HEAD_BYTES = 64 * 1024


class HttpError(Exception):
    """The response could not be parsed (the connection is closed)."""


class Sink(Protocol):
    def head(self, status: int, headers: dict[str, str]) -> None: ...

    def feed(self, data: bytes, now: float) -> None: ...


class Response:
    __slots__ = ("complete", "status")

    def __init__(self, status: int, complete: bool) -> None:
        self.status = status
        self.complete = complete  # False: the connection ended before the body did


class Http1Connection(asyncio.Protocol):
    __slots__ = (
        "_buf",
        "_chunked",
        "_done",
        "_keep",
        "_remaining",
        "_sink",
        "_status",
        "_transport",
        "closed",
    )

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._sink: Sink | None = None
        self._done: asyncio.Future[Response] | None = None
        self._status = 0
        self._chunked: ChunkedDecoder | None = None
        self._remaining = -1  # body bytes still expected; -1: until the connection closes
        self._keep = True
        self.closed = False

    # --- client side -------------------------------------------------------------------------
    @property
    def reusable(self) -> bool:
        return not self.closed and self._done is None and self._keep

    def send(self, data: bytes, sink: Sink) -> asyncio.Future[Response]:
        """Write a whole request; the future resolves when its response has ended."""
        assert self._transport is not None and self._done is None and not self.closed
        self._sink = sink
        self._status = 0
        self._buf.clear()
        self._done = asyncio.get_running_loop().create_future()
        self._transport.write(data)
        return self._done

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.abort()

    # --- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._done is None:
            return
        if self._status and self._chunked is None and self._remaining < 0:
            self._end(True)  # a body delimited by the end of the connection
        elif self._status:
            self._end(False)
        else:
            self._fail(HttpError("connection closed before the response head"))

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if self._done is None:
            self.close()  # nothing was asked
            return
        if not self._status:
            self._buf += data
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > MAX_HEAD_BYTES:
                    self._fail(HttpError("response head too large"))
                return
            try:
                self._head(bytes(self._buf[:end]))
            except (ValueError, IndexError):
                self._fail(HttpError("malformed response head"))
                return
            data = bytes(self._buf[end + 4 :])
            self._buf.clear()
            if not data and self._remaining != 0:
                return
        self._body(data, now)

    def _head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        version, status, *_ = lines[0].split(" ", 2)
        if not version.startswith("HTTP/1."):
            raise ValueError(version)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        self._status = int(status)
        self._keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        self._chunked = None
        self._remaining = -1
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._chunked = ChunkedDecoder()
        elif "content-length" in headers:
            self._remaining = int(headers["content-length"])
        elif self._status in (204, 304):
            self._remaining = 0
        if self._remaining < 0 and self._chunked is None:
            self._keep = False
        assert self._sink is not None
        self._sink.head(self._status, headers)

    def _body(self, data: bytes, now: float) -> None:
        sink = self._sink
        assert sink is not None
        if self._chunked is not None:
            try:
                payload, finished = self._chunked.feed(data)
            except ChunkedError:
                self._fail(HttpError("malformed chunked body"))
                return
            if payload:
                sink.feed(payload, now)
            if finished:
                self._end(True)
            return
        if self._remaining >= 0:
            take = data[: self._remaining]
            self._remaining -= len(take)
            if take:
                sink.feed(take, now)
            if self._remaining == 0:
                self._end(True)
            return
        if data:
            sink.feed(data, now)

    def _end(self, complete: bool) -> None:
        done, self._done, self._sink = self._done, None, None
        if not complete or not self._keep:
            self.close()
        if done is not None and not done.done():
            done.set_result(Response(self._status, complete))

    def _fail(self, exc: Exception) -> None:
        done, self._done, self._sink = self._done, None, None
        self.close()
        if done is not None and not done.done():
            done.set_exception(exc)


async def connect(host: str, port: int, timeout_s: float) -> Http1Connection:
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(timeout_s):
        _, proto = await loop.create_connection(Http1Connection, host, port)
    return proto
