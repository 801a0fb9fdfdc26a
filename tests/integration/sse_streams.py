"""Many streaming chat requests from one process, each a bare asyncio Protocol on its own
connection: it keeps only counters and the last bytes read (so the client's own memory per
stream stays small and in this one file, which a tracemalloc filter can leave out)."""

from __future__ import annotations

import asyncio
import sys
from typing import cast

import orjson

from tests.integration.poll import until_async

DATA = b"data: "
DONE = b"data: [DONE]"
_TAIL = len(DONE)


def request(port: int, max_tokens: int, prompt: str = "Say something.") -> bytes:
    body = orjson.dumps(
        {
            "model": "sim-llama",
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "stream": True,
            "ignore_eos": True,
        }
    )
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


class SseStream(asyncio.Protocol):
    """One request; `events` counts `data:` lines, `done` is set at `data: [DONE]` (or when
    the connection ends, with `complete` False)."""

    __slots__ = ("_payload", "_tail", "_transport", "complete", "done", "events", "status_ok")

    def __init__(self, payload: bytes, done: asyncio.Future[None]) -> None:
        self._payload = payload
        self._tail = b""
        self._transport: asyncio.Transport | None = None
        self.events = 0
        self.status_ok: bool | None = None
        self.complete = False
        self.done = done

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = t = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        t.write(self._payload)

    def data_received(self, data: bytes) -> None:
        if self.status_ok is None:
            self.status_ok = data.startswith(b"HTTP/1.1 200")
        seen = self._tail + data
        self.events += seen.count(DATA) - self._tail.count(DATA)
        if DONE in seen:
            self.complete = True
        self._tail = seen[-_TAIL:]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


async def open_streams(
    port: int, n: int, max_tokens: int, timeout_s: float, batch: int = 100
) -> list[SseStream]:
    """`n` streams, all connected and sent (each its own connection; `batch` connect at once)."""
    loop = asyncio.get_running_loop()
    payload = request(port, max_tokens)

    async def one() -> SseStream:
        done: asyncio.Future[None] = loop.create_future()
        _, proto = await loop.create_connection(lambda: SseStream(payload, done), "127.0.0.1", port)
        return proto

    streams: list[SseStream] = []
    async with asyncio.timeout(timeout_s):
        for start in range(0, n, batch):
            streams += await asyncio.gather(*(one() for _ in range(min(batch, n - start))))
    return streams


async def _drive(port: int, n: int, long_tokens: int, short_tokens: int) -> None:
    """The client of the memory test, run as its own process: it says where it is on stdout
    and waits for the test's word on stdin between phases (each a deadline)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    def say(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    async def word(expected: str) -> None:
        async with asyncio.timeout(120.0):
            got = (await reader.readline()).decode().strip()
        if got != expected:
            raise SystemExit(f"expected {expected!r} on stdin, got {got!r}")

    streams = await open_streams(port, n, long_tokens, 60.0)
    await until_async(lambda: all(s.events >= 2 for s in streams), 60.0, "every stream streams")
    ok = all(s.status_ok for s in streams) and not any(s.complete for s in streams)
    say(f"streaming {'ok' if ok else 'bad'}")
    await word("drop")
    for s in streams:
        s.close()
    streams.clear()
    await word("run")
    ended = await open_streams(port, n, short_tokens, 60.0)
    async with asyncio.timeout(120.0):
        for s in ended:
            await s.done
    say(f"ended {sum(1 for s in ended if s.complete and s.status_ok)}")


if __name__ == "__main__":
    import uvloop

    port_, n_, long_, short_ = (int(a) for a in sys.argv[1:5])
    uvloop.run(_drive(port_, n_, long_, short_))
