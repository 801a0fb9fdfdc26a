"""The Link over plain TCP (shardgate/v1/wire.py): one LinkSession per gateway connection.

Reads have no deadline, because an idle gateway sends nothing. A gone gateway shows on the
write side instead: heartbeats go out every interval, and a socket that does not drain within
`drain_timeout_s` (or that errors) ends the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl as ssl_module
from collections.abc import Callable

import msgspec
from shardgate.v1 import wire

from engine_sidecar import convert
from engine_sidecar.link import Batch, LinkSession, Requests
from gateway import tasks

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_S = 5.0
_READ_SIZE = 1 << 16
_HIGH_WATER = 1 << 20
_UP = msgspec.msgpack.Decoder(wire.Up)
_DOWN = msgspec.msgpack.Encoder()


def encode(batch: Batch) -> bytes:
    deltas = [
        wire.WireDelta(
            key,
            d.token_ids,
            d.text,
            d.finish,
            d.prompt_tokens,
            d.cached_tokens,
            d.completion_tokens,
            d.error_code,
            d.error_message,
            d.error_field,
            d.logprobs,
            d.stop_sequence,
            d.parsed,
            d.prompt_logprobs,
        )
        for key, d in batch.items
    ]
    load = batch.load.SerializeToString() if batch.load is not None else b""
    info = batch.info.SerializeToString() if batch.info is not None else b""
    kv = batch.kv.SerializeToString() if batch.kv is not None else b""
    return wire.frame(_DOWN.encode(wire.Down(deltas, load, info, kv)))


async def requests(reader: asyncio.StreamReader) -> Requests:
    """The gateway's submits and aborts, frame by frame, until it closes its side."""
    frames = wire.FrameReader()
    while data := await reader.read(_READ_SIZE):
        for body in frames.feed(data):
            up = _UP.decode(body)
            yield [(sub.key, convert.from_wire(sub)) for sub in up.submits], up.aborts


class TcpLinkServer:
    """`ssl`: the TLS every connection must complete (within the handshake timeout) before
    anything is read."""

    def __init__(
        self,
        new_session: Callable[[], LinkSession],
        drain_timeout_s: float,
        ssl: ssl_module.SSLContext | None = None,
    ) -> None:
        self._new_session = new_session
        self._drain_timeout_s = drain_timeout_s
        self.ssl = ssl
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()
        self._stopping = False
        self.open = 0

    async def start(self, host: str, port: int) -> int:
        handshake = HANDSHAKE_TIMEOUT_S if self.ssl is not None else None
        self._server = await asyncio.start_server(
            self._serve, host, port, ssl=self.ssl, ssl_handshake_timeout=handshake
        )
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        self._stopping = True
        if self._server is not None:
            self._server.close()
        await tasks.stop_all(list(self._conns))
        if self._server is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        try:
            async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
                magic = await reader.readexactly(len(wire.MAGIC))
            if magic != wire.MAGIC:
                if magic.startswith(wire.MAGIC_PREFIX):
                    log.warning(
                        "tcp link: the gateway speaks link protocol %d, this sidecar %d: run "
                        "the same shardgate version on both; closing",
                        magic[-1],
                        wire.MAGIC[-1],
                    )
                else:
                    log.warning("tcp link: not a shardgate link (%r); closing", magic)
                return
            await self._relay(reader, writer)
        except (OSError, EOFError, TimeoutError) as e:  # bad frames end the session's reader
            log.warning("tcp link ended: %s", str(e) or type(e).__name__)
        except asyncio.CancelledError:
            # The server's own stop ends its connections: the handler returns, for asyncio's
            # streams read the result of a connection's task and log a cancelled one as an
            # error. Any other cancellation is not ours to end.
            if not self._stopping:
                raise
        finally:
            self._conns.discard(task)
            writer.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session = self._new_session()
        transport = writer.transport

        def direct() -> bool:
            """Write what is pending where it became so (an engine step's deltas reach the
            socket in the step's own loop iteration); False while the socket is backed up or
            the session ends: its task takes over."""
            if session.closed or transport.is_closing():
                return False
            if transport.get_write_buffer_size() > _HIGH_WATER:
                return False
            batch = session.build()
            if batch is not None:
                writer.write(encode(batch))
            return True

        self.open += 1
        try:
            async for batch in session.run(requests(reader)):
                writer.write(encode(batch))
                if transport.get_write_buffer_size() > _HIGH_WATER:
                    session.box.direct = None
                    async with asyncio.timeout(self._drain_timeout_s):
                        await writer.drain()
                session.box.direct = direct  # (after the announcement: it goes first)
        finally:
            session.box.direct = None
            self.open -= 1
