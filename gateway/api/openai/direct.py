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

from gateway.runtime.flush import FLUSHER
from gateway.streams.sse import Tape
from gateway.types import Delta, Logprobs

# Bytes queued in the transport beyond which frames wait for the handler (and its drain).
HIGH_WATER = 64 << 10


class Counter(Protocol):
    def add(self, d: Delta) -> None: ...


class TokenEncoder(Protocol):
    """Renders one token delta's SSE event (each API edge has its own)."""

    def token_chunk_into(
        self, buf: bytearray, text: str, logprobs: list[Logprobs] | None = None
    ) -> None: ...


class DirectSink:
    __slots__ = (
        "_buf",
        "_chunked",
        "_cut",
        "_dirty",
        "_enc",
        "_owns",
        "_owns_from",
        "_seq",
        "_shape",
        "_starts",
        "_tally",
        "_tape",
        "_transport",
    )

    def __init__(
        self,
        transport: asyncio.BaseTransport,
        chunked: bool,
        enc: TokenEncoder,
        tally: Counter,
        tape: Tape | None = None,
        plain: tuple[bytes, bytes] | None = None,
    ) -> None:
        """`plain`: what comes before and after the text's JSON in every event `enc` writes
        (a kept stream's events then go to its log as that shape and their text)."""
        self._transport = cast(asyncio.WriteTransport, transport)
        self._chunked = chunked
        self._enc = enc
        self._tally = tally
        self._tape = tape  # a kept stream's: each frame gets its id and is kept
        self._seq = 0  # (a kept stream's: the next frame's number)
        self._starts: list[int] = []  # (a kept stream's: where each buffered frame starts)
        self._owns: list[int] = []  # (and where its own bytes start, with a shape)
        self._shape = 0
        self._owns_from = self._cut = 0  # (the bytes before and after them)
        if tape is not None and plain is not None:
            self._shape = tape.log.given_shape(*plain)
            self._cut = len(plain[1])
            self._owns_from = len(plain[0])
        self._buf = bytearray()
        self._dirty = False  # holds frames, and is on the flusher's list

    def __call__(self, d: Delta) -> bool:
        if d.finish or d.parsed or not (d.token_ids or d.text):
            return False
        tape = self._tape
        if not self._dirty:  # the first frame of this message: is the client keeping up?
            t = self._transport
            if t.is_closing() or t.get_write_buffer_size() > HIGH_WATER:
                return False
            self._dirty = True
            FLUSHER.dirty.append(self)
            if tape is not None:
                self._seq = tape.log.next_seq
        self._tally.add(d)
        buf = self._buf
        if tape is not None:  # its id first
            self._starts.append(len(buf))
            buf += tape.prefix
            buf += b"%d\n" % self._seq
            self._seq += 1
            if self._shape:
                self._owns.append(len(buf) + self._owns_from)
        self._enc.token_chunk_into(buf, d.text, d.logprobs)
        return True

    def flush(self) -> None:
        """Send what was buffered (called once the link reader finished its message)."""
        self._dirty = False
        buf = self._buf
        if not buf:
            return
        t = self._transport
        starts = self._starts
        if starts:  # a kept stream's frames: kept even if the client left (numbered from the
            # log's next, in order: the request's handler flushes this sink before it numbers
            # its own events)
            assert self._tape is not None
            data = bytes(buf)
            log, k = self._tape.log, self._shape  # (k: its text's bytes only are kept)
            if len(starts) == 1:
                if k:
                    log.append_own(data[self._owns[0] : len(data) - self._cut], k, len(data))
                else:
                    log.append(data)
            else:
                ends = [*starts[1:], len(data)]
                if k:
                    cut = self._cut
                    owns = [data[a : b - cut] for a, b in zip(self._owns, ends, strict=True)]
                    log.extend_own(owns, len(data), k)  # (the frames are all of `data`)
                else:
                    log.extend([data[a:b] for a, b in zip(starts, ends, strict=True)])
            self._owns.clear()
            starts.clear()
            if not t.is_closing():
                t.write(b"".join((b"%x\r\n" % len(data), data, b"\r\n")) if self._chunked else data)
        elif not t.is_closing():
            # New bytes either way: the transport may keep what it is given.
            t.write(b"".join((b"%x\r\n" % len(buf), buf, b"\r\n")) if self._chunked else bytes(buf))
        buf.clear()
