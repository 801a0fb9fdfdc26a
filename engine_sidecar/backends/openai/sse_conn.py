"""Streamed calls to the engine server, read where the bytes arrive.

Each call is one POST on a keep-alive HTTP/1.1 connection of a bounded pool (pool.py). The
response is parsed in the connection's protocol callback (httptools), and each server-sent
event's `data:` payload goes straight to the call's handler there: no task wakes per event, no
deadline is moved per read, no object is made for a line the handler does not read. The
caller's task waits once, for the call's end.

Deadlines: the first chunk (connecting and the pool's wait included) within
`first_chunk_timeout_s`, each next one within `chunk_timeout_s`, an error status's body within
`rpc_timeout_s`, the whole call within `request_timeout_s`. They are checked by one timer per
call, which fires at the earliest of them and moves itself on if data came meanwhile.

A handler answers each payload with `MORE`, `DONE` (the request has ended as the server ended
it: its `[DONE]` follows, and the connection goes back to the pool once it came) or `STOP` (the
request ended here: the connection is closed, and the server aborts the request).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from engine_sidecar.backends.openai.pool import Connection, Pool

MORE: Final = 0
DONE: Final = 1
STOP: Final = 2

Handler = Callable[[bytes], int]

_MAX_LINE = 16 << 20  # one event (a chunk with token ids and text) at most
_MAX_ERROR_BODY = 1 << 20


class ServerStatus(Exception):
    """The server answered with an error status; `body` is its (bounded) answer."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.body = body


class Call:
    """One streamed POST; `ended` resolves when the handler is done or the stream is."""

    __slots__ = (
        "_chunk_s", "_conn", "_deadline", "_draining", "_error", "_finished", "_gap_s",
        "_handler", "_last", "_loop", "_pool", "_rest", "_rpc_s", "_status", "_timer",
        "ended", "reused",
    )  # fmt: skip

    def __init__(self, pool: Pool, handler: Handler, timeouts: tuple[float, float, float, float]):
        loop = self._loop = pool.loop
        first_s, self._chunk_s, self._rpc_s, whole_s = timeouts
        now = loop.time()
        self._deadline = now + whole_s
        self._last = now
        self._gap_s = first_s  # the longest wait for the next bytes: until the first chunk,
        # then chunk_s (rpc_s for an error's body)
        self._pool = pool
        self._handler: Handler | None = handler  # (None once it is done)
        self._conn: Connection | None = None
        self._rest = b""
        self._status = 0
        self._error = bytearray()
        self._finished = False
        self._draining = False
        self.reused = False  # on a kept connection
        self.ended: asyncio.Future[None] = loop.create_future()
        self._timer = loop.call_at(min(now + first_s, self._deadline), self._check)

    # --- the connection's callbacks ----------------------------------------------------------
    def status(self, code: int) -> None:
        self._status = code
        if code >= 400:
            self._wait(self._rpc_s)

    def body(self, data: bytes) -> None:
        self._last = self._loop.time()
        if self._gap_s != self._chunk_s and self._status < 400:
            self._wait(self._chunk_s)
        if self._status >= 400:
            if len(self._error) < _MAX_ERROR_BODY:
                self._error += data[: _MAX_ERROR_BODY - len(self._error)]
            return
        if self._rest:
            data = self._rest + data
            self._rest = b""
        elif data[:6] == b"data: " and data.find(b"\n") == len(data) - 2 and data[-1:] == b"\n":
            self._event(data[6:-2].strip())  # (one whole event: most reads of a stream)
            return
        start = 0
        find = data.find
        while (nl := find(b"\n", start)) >= 0:
            line = data[start:nl]
            start = nl + 1
            if line[:5] != b"data:":
                continue  # blank separators, comments, other fields
            if not self._event(line[5:].strip()):
                return
        if start < len(data):
            rest = data[start:]
            if len(rest) > _MAX_LINE:
                self._end(ConnectionError(f"an event line over {_MAX_LINE} bytes"))
                self._close()
            else:
                self._rest = rest

    def _event(self, payload: bytes) -> bool:
        """One event's data; False when nothing more is to be read from this body."""
        if payload == b"[DONE]":
            self._end(None)
            return False
        handler = self._handler
        if handler is None:  # (ended by the handler, and the server still sends tokens)
            self._close()
            return False
        try:
            verdict = handler(payload)
        except BaseException as e:  # (the handler's own failure ends this request)
            self._end(e)
            self._close()
            return False
        if verdict:
            self._handler = None
            self._draining = verdict == DONE
            self._settle(None)
            if verdict == STOP:
                self._close()
                return False
        return True

    def complete(self, keep_alive: bool) -> None:
        if self._status >= 400:
            self._end(ServerStatus(self._status, bytes(self._error)))
        else:
            self._end(None)  # (a stream the server ended without its [DONE]: the reader sees)
        if self._conn is not None:
            conn, self._conn = self._conn, None
            self._pool.release(conn, keep_alive)

    def lost(self, exc: BaseException | None) -> None:
        self._conn = None
        if not self._finished:
            reason = f": {exc}" if exc is not None else ""
            self._end(ConnectionResetError(f"the engine server closed the stream{reason}"))

    # --- the caller's side -------------------------------------------------------------------
    @property
    def answered(self) -> bool:
        """The server's answer began (its status line and headers came)."""
        return self._status != 0

    def start(self, conn: Connection, request: bytes, reused: bool) -> None:
        self._conn = conn
        self.reused = reused
        conn.begin(self, request)

    def close(self) -> None:
        """The caller is done with it (its end, or a cancellation). A call its handler ended
        with DONE reads on to its `[DONE]` (within its deadline), to keep the connection."""
        if self._draining:
            return
        self._handler = None
        if not self._finished:
            self._end(None)
            self._close()

    def _wait(self, seconds: float) -> None:
        """From now on, the longest wait for the next bytes (the timer moved where sooner)."""
        self._gap_s = seconds
        self._last = now = self._loop.time()
        due = min(now + seconds, self._deadline)
        if not self._finished and due < self._timer.when():
            self._timer.cancel()
            self._timer = self._loop.call_at(due, self._check)

    def _check(self) -> None:
        if self._finished:
            return
        now = self._loop.time()
        due = min(self._last + self._gap_s, self._deadline)
        if now < due:
            self._timer = self._loop.call_at(due, self._check)
            return
        self._end(TimeoutError("the engine server stopped responding"))
        self._close()

    def _settle(self, error: BaseException | None) -> None:
        if not self.ended.done():
            if error is None:
                self.ended.set_result(None)
            else:
                self.ended.set_exception(error)

    def _end(self, error: BaseException | None) -> None:
        if self._finished:
            return
        self._finished = True
        self._timer.cancel()
        self._handler = None
        self._settle(error)

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool.release(conn, False)
