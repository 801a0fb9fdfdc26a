"""The proxy floor: the least a Python process in front of a sidecar can cost per request.

An asyncio Protocol on uvloop that reads each HTTP/1.1 request (keep-alive, Content-Length
bodies), decodes its JSON into the engine request, sends it on one TCP link to a sidecar (every
request multiplexed, as the gateway's link does) and writes the deltas back as the gateway's SSE
chunks. Nothing else: no validation, tenants, admission, queue, routing, timers, stream store,
metrics or log line. The same sockets and system calls as the gateway, and the same passes of
the loop, so what the gateway costs above it is its own work:

    python -m bench.proxy_floor --sidecar 127.0.0.1:50371 --port 8098 &
    shardgate bench --url http://127.0.0.1:8098 --scenario w1 --output-tokens 1 --cpu-pid $!

Only streaming chat requests (`stream: true`) are served; anything else gets a 400.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import time
from typing import cast

import grpc
import msgspec
import uvloop
from shardgate.v1 import engine_pb2 as epb
from shardgate.v1 import engine_pb2_grpc as epb_grpc
from shardgate.v1 import params, wire

from gateway.api.openai.encode import DONE, ChunkEncoder
from gateway.types import Usage

_DOWN = msgspec.msgpack.Decoder(wire.Down)
_UP = msgspec.msgpack.Encoder()
_FINISH = {int(params.Finish.STOP): "stop", int(params.Finish.LENGTH): "length"}
_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)
_BAD = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
MAX_HEAD = 65536


class _Message(msgspec.Struct):
    role: str
    content: str


class _Body(msgspec.Struct):
    model: str
    messages: list[_Message]
    max_tokens: int = 16
    stream: bool = False
    ignore_eos: bool = False


_BODY = msgspec.json.Decoder(_Body)


def _chunk(data: bytes | bytearray) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class _Answer:
    """One request in flight: its client and the encoder of its chunks."""

    __slots__ = ("client", "enc", "prompt", "tokens")

    def __init__(self, client: _Client, enc: ChunkEncoder) -> None:
        self.client = client
        self.enc = enc
        self.prompt = 0
        self.tokens = 0

    def deliver(self, d: wire.WireDelta) -> bool:
        """Write `d` to the client; True at the request's last delta."""
        buf = bytearray()
        if not self.tokens and d.token_ids:
            buf += self.enc.role_chunk()
        if d.token_ids:
            self.enc.token_chunk_into(buf, d.text)
            self.tokens += len(d.token_ids)
        self.prompt = d.prompt_tokens or self.prompt
        t = self.client.transport
        if not d.finish:
            if buf and t is not None:
                t.write(_chunk(buf))
            return False
        self.enc.finish_chunk_into(buf, _FINISH.get(d.finish, "stop"))
        self.enc.usage_chunk_into(buf, Usage(self.prompt, self.tokens, 0))
        buf += DONE
        if t is not None:
            t.write(_chunk(buf) + b"0\r\n\r\n")
        return True


class _Link(asyncio.Protocol):
    """The one TCP link to the sidecar: submits out, deltas in."""

    def __init__(self) -> None:
        self.frames = wire.FrameReader()
        self.answers: dict[int, _Answer] = {}
        self.transport: asyncio.Transport | None = None
        self._keys = itertools.count(1)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def submit(self, gen: params.Generation, answer: _Answer) -> None:
        key = next(self._keys)
        self.answers[key] = answer
        assert self.transport is not None
        self.transport.write(wire.frame(_UP.encode(wire.Up([wire.WireSubmit(key, gen)]))))

    def data_received(self, data: bytes) -> None:
        for body in self.frames.feed(data):
            for d in _DOWN.decode(body).deltas:
                a = self.answers.get(d.key)
                if a is not None and a.deliver(d):
                    del self.answers[d.key]

    def connection_lost(self, exc: Exception | None) -> None:
        for a in self.answers.values():
            if a.client.transport is not None:
                a.client.transport.close()
        self.answers.clear()


class _Client(asyncio.Protocol):
    """One client connection: requests in (one at a time), answers out through the link."""

    def __init__(self, link: _Link) -> None:
        self.link = link
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self._ids = itertools.count()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while self.transport is not None:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEAD:
                    self._refuse()
                return
            length = _content_length(bytes(self.buf[:end]))
            if length is None:
                self._refuse()
                return
            if len(self.buf) < end + 4 + length:
                return
            body = bytes(self.buf[end + 4 : end + 4 + length])
            del self.buf[: end + 4 + length]
            self._serve(body)

    def _serve(self, raw: bytes) -> None:
        try:
            body = _BODY.decode(raw)
        except msgspec.DecodeError:  # (not JSON, or not a chat request's)
            self._refuse()
            return
        if not body.stream:
            self._refuse()
            return
        rid = f"{id(self):x}{next(self._ids):08x}"
        gen = params.Generation(
            request_id=rid,
            model=body.model,
            sampling=params.Sampling(max_tokens=body.max_tokens, ignore_eos=body.ignore_eos),
            messages=tuple(params.Message(m.role, m.content) for m in body.messages),
        )
        enc = ChunkEncoder(rid, body.model, int(time.time()), "chat")
        assert self.transport is not None
        self.transport.write(_HEAD)
        self.link.submit(gen, _Answer(self, enc))

    def _refuse(self) -> None:
        if self.transport is not None:
            self.transport.write(_BAD)
            self.transport.close()
            self.transport = None


def _content_length(head: bytes) -> int | None:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def connect(sidecar: str, timeout_s: float = 10.0) -> _Link:
    """The link to `sidecar` (its gRPC address; the link's port is read from its Info)."""
    async with grpc.aio.insecure_channel(sidecar) as ch:
        info = await epb_grpc.EngineStub(ch).Info(epb.InfoRequest(), timeout=timeout_s)
    if not info.link_port:
        raise ConnectionError(f"{sidecar} serves no TCP link")
    host = sidecar.rpartition(":")[0]
    loop = asyncio.get_running_loop()
    transport, link = await asyncio.wait_for(
        loop.create_connection(_Link, host, info.link_port), timeout_s
    )
    transport.write(wire.MAGIC)
    return link


class Proxy:
    """The proxy, listening on `port`, with its link."""

    def __init__(self, server: asyncio.Server, link: _Link) -> None:
        self.server = server
        self.link = link
        self.port = int(server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        self.server.close()
        await self.server.wait_closed()
        if self.link.transport is not None:
            self.link.transport.close()


async def start(sidecar: str, port: int) -> Proxy:
    """The proxy in front of `sidecar`, listening (port 0: any free one)."""
    link = await connect(sidecar)
    loop = asyncio.get_running_loop()
    return Proxy(await loop.create_server(lambda: _Client(link), "127.0.0.1", port), link)


async def serve(sidecar: str, port: int) -> None:
    proxy = await start(sidecar, port)
    print(f"proxy floor on 127.0.0.1:{proxy.port}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.proxy_floor", description=__doc__)
    p.add_argument("--sidecar", required=True, help="a sidecar's gRPC address (host:port)")
    p.add_argument("--port", type=int, default=8098)
    args = p.parse_args()
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve(args.sidecar, args.port))


if __name__ == "__main__":
    main()
