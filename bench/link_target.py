"""One sidecar over its TCP link (shardgate/v1/wire.py), the way the gateway talks to it: every
request multiplexed on one connection. This is the engine with nothing in front of it, for the
"TTFT the gateway adds" comparison.

Checked: a finish on the last delta, no error, tokens counted == completion tokens, and with
ignore_eos completion == max_tokens.
"""

from __future__ import annotations

import asyncio
import itertools
import time

import grpc
import msgspec
from shardgate.v1 import engine_pb2 as epb
from shardgate.v1 import engine_pb2_grpc as epb_grpc
from shardgate.v1 import wire

from bench import result as kinds
from bench.grpc_target import check_last_delta, generation
from bench.plan import RequestSpec
from bench.result import Result, TokenClock
from bench.scenario import Scenario

_DOWN = msgspec.msgpack.Decoder(wire.Down)
_UP = msgspec.msgpack.Encoder()


class _Stream:
    __slots__ = ("clock", "done", "last", "prompt")

    def __init__(self, clock: TokenClock) -> None:
        self.clock = clock
        self.prompt = 0
        self.last: wire.WireDelta | None = None
        self.done = asyncio.get_running_loop().create_future()


class _Reader(asyncio.Protocol):
    def __init__(self, streams: dict[int, _Stream]) -> None:
        self.streams = streams
        self.frames = wire.FrameReader()
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        for body in self.frames.feed(data):
            for d in _DOWN.decode(body).deltas:
                s = self.streams.get(d.key)
                if s is None:
                    continue
                if d.token_ids:
                    s.clock.tick(now, len(d.token_ids))
                s.prompt = d.prompt_tokens or s.prompt
                if d.finish:
                    s.last = d
                    del self.streams[d.key]
                    s.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        for s in self.streams.values():
            if not s.done.done():
                s.done.set_exception(ConnectionError("the sidecar closed the link"))
        self.streams.clear()
        if not self.lost.done():
            self.lost.set_result(None)


class LinkTarget:
    def __init__(self, target: str, scenario: Scenario) -> None:
        self.address = target
        self._scenario = scenario
        self._keys = itertools.count(1)
        self._streams: dict[int, _Stream] = {}
        self._transport: asyncio.Transport | None = None
        self._connecting: asyncio.Lock | None = None

    async def _connect(self) -> asyncio.Transport:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._transport is None:
                async with grpc.aio.insecure_channel(self.address) as ch:
                    info = await epb_grpc.EngineStub(ch).Info(epb.InfoRequest(), timeout=10)
                if not info.link_port:
                    raise ConnectionError(f"{self.address} serves no TCP link")
                host = self.address.rpartition(":")[0]
                loop = asyncio.get_running_loop()
                transport, _ = await asyncio.wait_for(
                    loop.create_connection(lambda: _Reader(self._streams), host, info.link_port),
                    10,
                )
                transport.write(wire.MAGIC)
                self._transport = transport
        assert self._transport is not None
        return self._transport

    async def __call__(self, spec: RequestSpec) -> Result:
        s = self._scenario
        transport = await self._connect()
        key = next(self._keys)
        msg = wire.WireSubmit(key, generation(s, spec))
        stream = _Stream(TokenClock(time.perf_counter()))
        self._streams[key] = stream
        transport.write(wire.frame(_UP.encode(wire.Up([msg]))))
        errors: list[str] = []
        detail = ""
        try:
            await asyncio.wait_for(stream.done, s.request_timeout_s)
        except TimeoutError:
            self._streams.pop(key, None)
            transport.write(wire.frame(_UP.encode(wire.Up(aborts=[key]))))
            errors.append(kinds.TIMEOUT)
        except ConnectionError as e:
            errors.append(kinds.ERROR_EVENT)
            detail = str(e)
        end = time.perf_counter()
        clock = stream.clock
        if not errors:
            detail = check_last_delta(stream.last, clock, s, spec, errors)
        return Result.from_clock(spec.index, spec.cls, clock, end, stream.prompt, errors, detail)

    async def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
