"""Token frames written straight from the link reader to the client's socket.

Once a stream's headers are out, its ResponseStream gets this sink: each token delta the link
reader pushes is encoded into an SSE event and buffered; when the reader is done with the engine
message, the buffer goes to the transport as one HTTP chunk (runtime/flush.py). No task switch,
no await per token. Whatever the sink declines (the end of the stream, keep-alives, or any delta
while the client's socket buffer is over the high-water mark) queues in the stream for the
request's handler, which writes it with backpressure.
"""

from __future__ import annotations

import asyncio
from typing import Protocol, cast

from gateway.api.openai.encode import ChunkEncoder
from gateway.runtime.flush import FLUSHER
from gateway.types import Delta

# Bytes queued in the transport beyond which frames wait for the handler (and its drain).
HIGH_WATER = 64 << 10
_HEAD = 8  # room for the chunk-size line, written in front once the payload's size is known


class Counter(Protocol):
    def add(self, d: Delta) -> None: ...


class DirectSink:
    __slots__ = ("_buf", "_chunked", "_enc", "_tally", "_transport")

    def __init__(
        self, transport: asyncio.BaseTransport, chunked: bool, enc: ChunkEncoder, tally: Counter
    ) -> None:
        self._transport = cast(asyncio.WriteTransport, transport)
        self._chunked = chunked
        self._enc = enc
        self._tally = tally
        self._buf = bytearray(_HEAD)

    def __call__(self, d: Delta) -> bool:
        if d.finish or not (d.token_ids or d.text):
            return False
        t = self._transport
        if t.is_closing() or t.get_write_buffer_size() > HIGH_WATER:
            return False
        self._tally.add(d)
        buf = self._buf
        if len(buf) == _HEAD:
            FLUSHER.dirty.append(self)
        self._enc.token_chunk_into(buf, d.text)
        return True

    def flush(self) -> None:
        """Send what was buffered (called once the link reader finished its message)."""
        buf = self._buf
        size = len(buf) - _HEAD
        if size <= 0:
            return
        t = self._transport
        if not t.is_closing():
            if self._chunked:
                head = b"%x\r\n" % size
                start = _HEAD - len(head)
                buf[start:_HEAD] = head
                buf += b"\r\n"
                t.write(buf[start:])  # a copy: the transport may keep what it is given
            else:
                t.write(buf[_HEAD:])
        del buf[_HEAD:]
