"""The link over the sidecar's TCP link (shardgate/v1/wire.py).

The reader is an asyncio Protocol: each chunk the socket delivers is split into frames and
their deltas are handed out inside `data_received`, with no task or await in between, and the
direct writes they caused are flushed once per chunk. Submits and aborts are written once per
loop iteration. A watchdog ends the session when nothing arrives for `heartbeat_timeout_s`,
or when the sidecar has not taken our writes for as long.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import TYPE_CHECKING, cast

import msgspec
from shardgate.v1 import engine_pb2 as pb
from shardgate.v1 import wire

from gateway.runtime.flush import FLUSHER
from gateway.upstream import convert, credentials

if TYPE_CHECKING:
    from gateway.upstream.link import EngineLink

log = logging.getLogger(__name__)

_DOWN = msgspec.msgpack.Decoder(wire.Down)
_UP = msgspec.msgpack.Encoder()


class Unreachable(ConnectionError):
    """The TCP link could not be opened (nothing was announced on it)."""


class BadData(ConnectionError):
    """The sidecar sent what the link cannot take: a broken frame, or another protocol."""


class LinkProtocol(asyncio.Protocol):
    def __init__(self, link: EngineLink, loop: asyncio.AbstractEventLoop) -> None:
        self.link = link
        self.loop = loop
        self.frames = wire.FrameReader()
        self.transport: asyncio.Transport | None = None
        self.announced: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()
        self.last_rx = time.monotonic()
        self.paused_at: float | None = None  # when the sidecar stopped taking our writes
        self._send_due = False

    # -- reading ---------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        self.transport.write(wire.MAGIC)

    def data_received(self, data: bytes) -> None:
        self.last_rx = now = time.monotonic()
        link = self.link
        try:
            for body in self.frames.feed(data):
                down = _DOWN.decode(body)
                if down.info and not self.announced.done():
                    self._announce(down)
                    continue
                if not self.announced.done():
                    raise wire.FrameError("the sidecar did not announce itself")
                if down.info:  # what it serves changed
                    link.reannounce(pb.InfoReply.FromString(down.info))
                if down.kv:
                    link.cache_changed(pb.KvEvents.FromString(down.kv))
                if down.deltas:
                    link.deliver(down.deltas)
                if down.load:
                    link.beat(pb.LoadReport.FromString(down.load))
                else:
                    link.last_activity = now
        except Exception as e:
            self._fail(e)
        finally:
            FLUSHER.flush()

    def _announce(self, down: wire.Down) -> None:
        info = pb.InfoReply.FromString(down.info)
        load = pb.LoadReport.FromString(down.load) if down.load else info.load
        self.link.kick = self.kick
        self.link.announced(info, load)
        if down.kv:
            self.link.cache_changed(pb.KvEvents.FromString(down.kv))
        self.announced.set_result(None)

    def _fail(self, error: BaseException) -> None:
        self._end(BadData(f"bad data from the sidecar: {error}"))
        if self.transport is not None:
            self.transport.abort()

    def _end(self, error: Exception) -> None:
        for fut in (self.announced, self.closed):
            if not fut.done():
                fut.set_exception(error)

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(ConnectionError(f"the sidecar closed the link{f': {exc}' if exc else ''}"))

    # -- writing ---------------------------------------------------------------------------
    def kick(self) -> None:
        if not self._send_due:
            self._send_due = True
            self.loop.call_soon(self._send)

    def _send(self) -> None:
        self._send_due = False
        if self.paused_at is not None or self.transport is None or self.transport.is_closing():
            return
        out = self.link.take_outgoing()
        if out is not None:
            submits = [convert.to_wire_submit(*o) for o in out[0]]
            self.transport.write(wire.frame(_UP.encode(wire.Up(submits, out[1]))))

    def pause_writing(self) -> None:
        self.paused_at = time.monotonic()

    def resume_writing(self) -> None:
        self.paused_at = None
        self.kick()


async def run(link: EngineLink, host: str, port: int) -> None:
    """One session: returns or raises when the connection ends."""
    loop = asyncio.get_running_loop()
    s = link.settings
    proto = LinkProtocol(link, loop)
    try:
        try:
            tls = credentials.tcp_context(s.tls)
            name = (s.tls.server_name or host) if s.tls is not None else None
            async with asyncio.timeout(s.connect_timeout_s):
                await loop.create_connection(
                    lambda: proto, host, port, ssl=tls, server_hostname=name
                )
                await proto.announced
        except BadData:
            raise  # it answered, and broke the protocol (or speaks another version)
        except (OSError, TimeoutError) as e:
            raise Unreachable(f"{host}:{port}: {str(e) or type(e).__name__}") from e
        await _watch(proto, s.heartbeat_timeout_s)
    finally:
        if proto.transport is not None:
            proto.transport.abort()
        for fut in (proto.announced, proto.closed):
            if not fut.done():
                fut.cancel()  # connection_lost may still come: nobody listens any more
            elif not fut.cancelled():
                fut.exception()  # retrieved: what the session raises says what happened


async def _watch(proto: LinkProtocol, timeout_s: float) -> None:
    while not proto.closed.done():
        await asyncio.wait([proto.closed], timeout=timeout_s / 4)
        now = time.monotonic()
        if now - proto.last_rx > timeout_s:
            raise TimeoutError(f"no message from the sidecar for {timeout_s:g} s")
        if proto.paused_at is not None and now - proto.paused_at > timeout_s:
            raise TimeoutError(f"the sidecar has not read the link for {timeout_s:g} s")
    proto.closed.result()
