"""One lean HTTP/1.1 connection: requests for the streaming routes read and answered here,
one at a time; the connection handed to aiohttp, untouched, at the first request it does not
take (gateway/api/lean/head.py says which).

- The head timer: armed at the connection's start and at the first byte of each later request,
  disarmed once the head is whole; a head late gets 408 and the connection closes (as
  `EdgeProtocol`'s). A connection handed to aiohttp keeps its head's start.
- The body: framed by its `Content-Length` (within `max_body_bytes`), read whole before the
  handler runs; a gap of `client_body_timeout_s` between its bytes gets 408 and a close.
- Keep-alive: an idle connection closes after `keepalive_timeout_s`. Pipelined requests wait
  in order (reading pauses past `PIPELINE_BYTES`).
- Backpressure: the transport's pause_writing/resume_writing; a write waits while it is paused.
- The client gone: the handler is cancelled (as aiohttp's `handler_cancellation=True`), and
  the handler's own code detaches or aborts the stream.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from typing import TYPE_CHECKING, cast

from aiohttp.tcp_helpers import tcp_keepalive

from gateway.api.edge import peer, raw_response
from gateway.api.error_shapes import error_shape
from gateway.api.http_errors import BodyTimeout, body_timeout, head_timeout
from gateway.api.lean import wire
from gateway.api.lean.exchange import LeanExchange
from gateway.api.lean.head import Head, HeadReader
from gateway.api.replies import error_parts, request_id
from gateway.ids import new_request_id
from gateway.observability.labels import ProtocolError

if TYPE_CHECKING:
    from gateway.api.lean.front import LeanFront

__all__ = ["PIPELINE_BYTES", "LeanProtocol"]

log = logging.getLogger(__name__)

# Bytes of later requests held while one is answered, before reading pauses.
PIPELINE_BYTES = 256 << 10
# The name of every request handler's task (the request id is in its log lines).
_TASK_NAME = "lean-request"


class LeanProtocol(asyncio.Protocol):
    __slots__ = (
        "_body_timer",
        "_buf",
        "_drain",
        "_fed",
        "_front",
        "_gone",
        "_head",
        "_head_end",
        "_head_since",
        "_head_timer",
        "_idle_timer",
        "_last_data",
        "_loop",
        "_reader",
        "_reading_paused",
        "close_after",
        "paused",
        "task",
        "transport",
    )

    def __init__(self, front: LeanFront) -> None:
        self._front = front
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._reader: HeadReader | None = None  # a head being read
        self._fed = 0  # bytes of the buffer fed to the reader
        self._head: Head | None = None  # a whole head whose body is being read
        self._head_end = 0
        self._head_since = 0.0
        self._last_data = 0.0
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None  # the handler answering
        self.close_after = False  # close once the answer is out
        self.paused = False  # the transport's buffer is over its high-water mark
        self._drain: asyncio.Future[None] | None = None
        self._reading_paused = False
        self._gone = False

    # -- asyncio's callbacks -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        t = self.transport = cast(asyncio.Transport, transport)
        tcp_keepalive(t)
        self._front.conns.add(self)
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        self._buf += data
        if self.task is not None:  # pipelined: waits for the answer in flight
            if len(self._buf) > PIPELINE_BYTES and not self._reading_paused:
                self._reading_paused = True
                cast(asyncio.Transport, self.transport).pause_reading()
            return
        if self._head is not None:
            self._last_data = self._loop.time()
        self._advance()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._gone = True
        self._cancel_timers()
        self._front.conns.discard(self)
        self._wake()
        if self.task is not None:
            self.task.cancel()  # the client left: its handler detaches or aborts

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._wake()

    # -- reading requests ----------------------------------------------------------------------
    def _advance(self) -> None:
        buf = self._buf
        head = self._head
        if head is None:
            if not buf:
                return
            reader = self._reader
            if reader is None:  # the first byte of a request
                reader = self._reader = HeadReader(self._front.limits)
                self._fed = 0
                if self._idle_timer is not None:
                    self._idle_timer.cancel()
                    self._idle_timer = None
                if self._head_timer is None:
                    self._arm_head_timer()
            fed = self._fed
            end = buf.find(b"\r\n\r\n", max(0, fed - 3))
            stop = end + 4 if end >= 0 else len(buf)
            verdict = reader.feed(bytes(buf[fed:stop]), end >= 0)
            self._fed = stop
            if verdict is None:
                return
            if verdict is False:
                self._hand_over()
                return
            head = self._head = verdict
            self._reader = None
            self._head_end = stop
            self._last_data = self._loop.time()
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
        end = self._head_end + head.length
        if len(buf) < end:
            if self._body_timer is None:
                self._arm_body_timer(self._front.settings().client_body_timeout_s)
            return
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        body = bytes(buf[self._head_end : end])
        del buf[:end]
        self._head = None
        self.close_after = head.close or self._front.draining
        # One context for the task and its done callback, and one name for every request's
        # task: a task's own name and contexts cost ~300 bytes for the length of a stream.
        ctx = contextvars.copy_context()
        task = self.task = self._loop.create_task(
            self._front.serve(LeanExchange(self, head, body)), name=_TASK_NAME, context=ctx
        )
        task.add_done_callback(self._served, context=ctx)

    def _served(self, task: asyncio.Task[None]) -> None:
        self.task = None
        t = self.transport
        if t is None or self._gone:
            return
        if task.cancelled():  # (cut at its deadline, or the gateway stops): half an answer
            self.close_after = True
        elif (exc := task.exception()) is not None:
            log.error("lean request handler failed", exc_info=exc)
            self.close_after = True
        if self.close_after or t.is_closing():
            t.close()
            return
        if self._reading_paused:
            self._reading_paused = False
            t.resume_reading()
        if self._buf:
            self._advance()
        elif self._head is None and self._reader is None:
            self._idle_timer = self._loop.call_later(self._front.keepalive_s, self._idle_late)

    def _hand_over(self) -> None:
        """aiohttp's protocol takes the connection, with every byte of this request."""
        make = self._front.make_edge
        t = self.transport
        assert make is not None and t is not None
        self._cancel_timers()
        self._front.conns.discard(self)
        data = bytes(self._buf)
        self._buf.clear()
        self._reader = None
        make().take_over(t, data, self._head_since, self.paused)
        if self._reading_paused:
            t.resume_reading()

    # -- timers --------------------------------------------------------------------------------
    def _arm_head_timer(self) -> None:
        self._head_since = now = self._loop.time()
        timeout = self._front.edge.header_timeout_s
        self._head_timer = self._loop.call_at(now + timeout, self._head_late)

    def _head_late(self) -> None:
        self._head_timer = None
        t = self.transport
        if t is None or self._gone or self.task is not None or self._head is not None:
            return
        edge = self._front.edge
        rid = new_request_id()
        edge.report(ProtocolError.HEADER_TIMEOUT, peer(t), "request head", rid)
        t.write(raw_response(head_timeout(edge.header_timeout_s), rid))
        t.close()

    def _arm_body_timer(self, gap_s: float) -> None:
        self._body_timer = self._loop.call_at(self._last_data + gap_s, self._body_late, gap_s)

    def _body_late(self, gap_s: float) -> None:
        self._body_timer = None
        head, t = self._head, self.transport
        if head is None or t is None or self._gone:
            return
        if self._loop.time() - self._last_data < gap_s:  # bytes came meanwhile
            self._arm_body_timer(gap_s)
            return
        have = len(self._buf) - self._head_end
        rid = request_id(head.headers.get("x-request-id"))
        self._front.edge.report(ProtocolError.BODY_TIMEOUT, peer(t), f"{have} bytes read", rid)
        err: BodyTimeout = body_timeout(gap_s)
        status, headers, body = error_parts(err, rid, error_shape(head.path))
        t.write(wire.reply(status, headers, body, True, wire.http_date(time.time())))
        t.close()

    def _idle_late(self) -> None:
        self._idle_timer = None
        t = self.transport
        if t is not None and self.task is None and not self._buf:
            t.close()

    def _cancel_timers(self) -> None:
        for timer in (self._head_timer, self._body_timer, self._idle_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = self._idle_timer = None

    # -- what the exchange and the front use --------------------------------------------------
    def writable(self) -> asyncio.Transport:
        """The transport, or `ConnectionResetError` once it is closing (as aiohttp raises)."""
        t = self.transport
        if t is None or t.is_closing():
            raise ConnectionResetError("Cannot write to closing transport")
        return t

    async def drained(self) -> None:
        """Returns once the transport takes more (or the connection is gone)."""
        while self.paused and not self._gone:
            waiter = self._drain = self._loop.create_future()
            await waiter

    def _wake(self) -> None:
        waiter = self._drain
        if waiter is not None:
            self._drain = None
            if not waiter.done():
                waiter.set_result(None)

    def drain(self) -> None:
        """The gateway stops: close now when idle, else after the answer in flight."""
        self.close_after = True
        if self.task is None:
            self.close()

    def close(self) -> None:
        t = self.transport
        if t is not None:
            t.close()
