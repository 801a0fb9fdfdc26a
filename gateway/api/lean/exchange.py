"""The OpenAI handler's exchange over a lean connection (gateway/api/openai/exchange.py): the
request as the connection read it, answers written straight to its transport."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from gateway.api.error_shapes import error_shape
from gateway.api.http_errors import ClosingError
from gateway.api.lean import wire
from gateway.api.lean.head import KEPT, Head
from gateway.api.openai.exchange import Reply
from gateway.api.replies import error_parts, request_id
from gateway.types import GatewayError

if TYPE_CHECKING:
    from gateway.api.lean.protocol import LeanProtocol

__all__ = ["LeanExchange", "LeanOutbound"]

_SENT: dict[str, str] = {}  # an outbound's headers once in its head (never written to)


class LeanOutbound:
    """A chunked 200: its head leaves with its first write, in the same `send()`."""

    __slots__ = ("_conn", "_head", "_headers", "_started", "finished")

    def __init__(self, conn: LeanProtocol, headers: dict[str, str]) -> None:
        self._conn = conn
        self._headers = headers
        self._head = b""
        self._started = False
        self.finished = False  # its last chunk was written

    @property
    def started(self) -> bool:
        return self._started

    @property
    def sent(self) -> bool:
        """Its head left (with its first write): the client has its 200."""
        return self._started and not self._head

    @property
    def chunked(self) -> bool:
        return True

    async def start(self) -> None:
        if not self._started:
            self._started = True
            self._head = wire.stream_head(
                self._headers, self._conn.close_after, wire.http_date(time.time())
            )
            self._headers = _SENT  # (in its head: not held for the rest of the stream)

    def _framed(self, data: bytes) -> bytes:
        head = self._head
        if head:
            self._head = b""
            return head + wire.chunk(data)
        return wire.chunk(data)

    async def write(self, data: bytes) -> None:
        conn = self._conn
        conn.writable().write(self._framed(data))
        if conn.paused:
            await conn.drained()

    async def write_eof(self, data: bytes = b"") -> None:
        if self.finished:
            return
        await self.start()
        conn = self._conn
        conn.writable().write(self._framed(data) + wire.LAST_CHUNK)
        self.finished = True
        if conn.paused:
            await conn.drained()


class LeanExchange:
    __slots__ = ("_body", "_conn", "_out", "extra", "head", "rid")

    def __init__(self, conn: LeanProtocol, head: Head, body: bytes) -> None:
        self._conn = conn
        self.head = head
        self.rid = request_id(head.headers.get("x-request-id"))  # (named by every answer)
        self._body = body
        self._out: LeanOutbound | None = None
        self.extra: dict[str, str] = {}  # headers of every answer (the worker's, under --workers)

    @property
    def transport(self) -> asyncio.Transport | None:
        return self._conn.transport

    def header(self, name: str) -> str | None:
        """(Of the headers head.KEPT only: asking for another is a bug, not a missing header.)"""
        name = name.lower()
        if name not in KEPT:
            raise KeyError(f"the lean path keeps no {name!r} header (head.KEPT)")
        return self.head.headers.get(name)

    async def body(self, max_bytes: int, gap_s: float) -> bytes:
        """(Read whole by the connection, within the same limits, before the handler ran.)
        Handed over: the exchange keeps none of it for the rest of a long stream."""
        body, self._body = self._body, b""
        return body

    def sse(self, headers: dict[str, str]) -> LeanOutbound:
        headers["x-request-id"] = self.rid
        if self.extra:
            headers.update(self.extra)
        self._out = LeanOutbound(self._conn, headers)
        return self._out

    # -- answers -------------------------------------------------------------------------------
    def reply(self, answer: Reply) -> None:
        headers = answer.headers
        headers["x-request-id"] = self.rid
        if self.extra:
            headers.update(self.extra)
        close = self._conn.close_after
        self._send(wire.reply(200, headers, answer.body, close, wire.http_date(time.time())))

    def error(self, err: GatewayError) -> None:
        """The error response; or, when a streamed answer already went out in part, the
        connection closed (one started but not yet written still gets the error response)."""
        if self._out is not None and self._out.sent:
            self.abandon()
            return
        status, headers, body = error_parts(err, self.rid, error_shape(self.head.path))
        if self.extra:
            headers.update(self.extra)
        if isinstance(err, ClosingError):
            self._conn.close_after = True
        close = self._conn.close_after
        self._send(wire.reply(status, headers, body, close, wire.http_date(time.time())))

    def ended(self) -> bool:
        """The streamed answer went out whole."""
        return self._out is not None and self._out.finished

    def abandon(self) -> None:
        """The answer cannot be finished: the connection closes."""
        self._conn.close_after = True
        transport = self._conn.transport
        if transport is not None:
            transport.close()

    def _send(self, data: bytes) -> None:
        transport = self._conn.transport
        if transport is not None and not transport.is_closing():
            transport.write(data)
