"""The connections of the openai backend's streamed calls (sse_conn.py): at most `limit` to one
server, kept between calls and reused newest first. A kept one the server closes (its
keep-alive timeout) leaves the pool when it closes; the client sends a request that found it
closing, unanswered, once more on a new one (client.py)."""

from __future__ import annotations

import asyncio
import collections
import socket
import ssl
from typing import cast
from urllib.parse import urlsplit

import httptools
import msgspec

from engine_sidecar.backends.openai.sse_conn import Call, Handler

_ENCODE = msgspec.json.Encoder()


class Connection(asyncio.Protocol):
    """One connection; it carries one call at a time."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self.transport: asyncio.Transport | None = None
        self._call: Call | None = None
        self._parser: httptools.HttpResponseParser | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is not a subclass)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def begin(self, call: Call, request: bytes) -> None:
        assert self.transport is not None
        self._call = call
        self._parser = httptools.HttpResponseParser(self)
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        parser = self._parser
        if parser is None:  # (bytes on an idle connection: not HTTP we can follow)
            self.close()
            return
        try:
            parser.feed_data(data)
        except httptools.HttpParserError as e:
            call = self._call
            self.close()
            if call is not None:
                call.lost(e)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._pool.forget(self)
        call, self._call, self._parser = self._call, None, None
        if call is not None:
            call.lost(exc)

    def close(self) -> None:
        self._call = self._parser = None
        if self.transport is not None:
            self.transport.close()

    def detach(self) -> None:
        self._call = self._parser = None

    # --- httptools' callbacks ----------------------------------------------------------------
    def on_headers_complete(self) -> None:
        if self._call is not None and self._parser is not None:
            self._call.status(self._parser.get_status_code())

    def on_body(self, body: bytes) -> None:
        if self._call is not None:
            self._call.body(body)

    def on_message_complete(self) -> None:
        call, parser = self._call, self._parser
        if call is not None and parser is not None:
            call.complete(parser.should_keep_alive())


class Pool:
    """At most `limit` connections to one server; the kept ones reused newest first."""

    def __init__(self, url: str, headers: dict[str, str], limit: int, connect_s: float) -> None:
        u = urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.prefix = u.path.rstrip("/")
        self._ssl = ssl.create_default_context() if u.scheme == "https" else None
        default = self.port == (443 if u.scheme == "https" else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host  # (an IPv6 literal)
        host = host if default else f"{host}:{self.port}"
        lines = [f"Host: {host}", "Content-Type: application/json", "Accept: text/event-stream"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self._headers = ("\r\n".join(lines) + "\r\n").encode("latin-1")
        self._limit = limit
        self._connect_s = connect_s
        self._idle: list[Connection] = []
        self._open: set[Connection] = set()
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._closed = False
        self.loop = asyncio.get_running_loop()

    def request(self, path: str, body: object) -> bytes:
        data = _ENCODE.encode(body)
        head = f"POST {self.prefix}{path} HTTP/1.1\r\nContent-Length: {len(data)}\r\n"
        return head.encode("latin-1") + self._headers + b"\r\n" + data

    async def call(
        self, path: str, body: object, handler: Handler, timeouts: tuple[float, float, float, float]
    ) -> Call:
        """A started call (its deadlines run from now); raises what connecting raises."""
        call = Call(self, handler, timeouts)
        try:
            async with asyncio.timeout(timeouts[0]):
                conn, reused = await self._acquire()
        except BaseException:
            call.close()
            raise
        call.start(conn, self.request(path, body), reused)
        return call

    async def _acquire(self) -> tuple[Connection, bool]:
        """A connection, and whether it is a kept one."""
        while True:
            if self._closed:
                raise ConnectionError("the engine server's connection pool is closed")
            while self._idle:
                conn = self._idle.pop()
                if conn.transport is not None:
                    return conn, True
            if len(self._open) < self._limit:
                break
            waiter = self.loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # (a cancelled waiter passes the slot it was given on)
                raise
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        conn = Connection(self)
        self._open.add(conn)
        try:
            async with asyncio.timeout(self._connect_s):
                await self.loop.create_connection(
                    lambda: conn,
                    self.host,
                    self.port,
                    ssl=self._ssl,
                    server_hostname=self.host if self._ssl is not None else None,
                )
        except BaseException:
            self.forget(conn)
            conn.close()
            raise
        return conn, False

    def release(self, conn: Connection, keep: bool) -> None:
        if keep and not self._closed and conn.transport is not None:
            conn.detach()
            self._idle.append(conn)
            self._wake()
        else:
            conn.close()  # (forgotten in connection_lost)

    def forget(self, conn: Connection) -> None:
        self._open.discard(conn)
        if conn in self._idle:
            self._idle.remove(conn)
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    @property
    def idle(self) -> int:
        """Kept connections waiting for a call."""
        return len(self._idle)

    @property
    def waiting(self) -> int:
        """Calls waiting for a connection (the pool is at its limit)."""
        return len(self._waiters)

    def close(self) -> None:
        self._closed = True
        for conn in list(self._open):
            conn.close()
        self._idle.clear()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
