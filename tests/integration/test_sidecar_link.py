"""The sidecar's Engine service over loopback: the multiplexed Link (over gRPC and over the TCP
link), Generate, Info, health."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import msgspec
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from shardgate.v1 import engine_pb2 as pb
from shardgate.v1 import engine_pb2_grpc as pb_grpc
from shardgate.v1 import params, wire

from engine_sidecar.backends.sim import SimConfig
from engine_sidecar.backends.sim.config import SimFaults
from engine_sidecar.backends.sim.engine import SimBackend
from engine_sidecar.config import SidecarConfig
from engine_sidecar.server import Sidecar
from gateway import tasks
from gateway.upstream.grpc_link import LINK_METADATA


@pytest.fixture
async def sidecar() -> AsyncIterator[Sidecar]:
    cfg = SidecarConfig(
        name="t", port=0, heartbeat_interval_s=0.05, sim=SimConfig(profile="fast", max_num_seqs=8)
    )
    s = Sidecar(cfg)
    await s.start()
    yield s
    await s.stop(0.5)


@pytest.fixture
async def stub(sidecar: Sidecar) -> AsyncIterator[pb_grpc.EngineStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{sidecar.port}") as ch:
        yield pb_grpc.EngineStub(ch)


def wire_submit(m: pb.SubmitRequest) -> wire.WireSubmit:
    return wire.WireSubmit(m.key, params.decode(m.generation), list(m.resume_token_ids))


class WireCall:
    """The TCP link driven like a gRPC Link call: the same messages in and out."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._frames = wire.FrameReader()
        self._ready: list[bytes] = []

    async def read(self) -> pb.LinkResponse | object:
        while not self._ready:
            data = await self._reader.read(1 << 16)
            if not data:
                return grpc.aio.EOF
            self._ready += self._frames.feed(data)
        down = msgspec.msgpack.decode(self._ready.pop(0), type=wire.Down)
        msg = pb.LinkResponse()
        for d in down.deltas:
            msg.deltas.add(**msgspec.structs.asdict(d))
        if down.load:
            msg.load.ParseFromString(down.load)
        if down.info:
            msg.info.ParseFromString(down.info)
        if down.kv:
            msg.kv.ParseFromString(down.kv)
        return msg

    async def write(self, msg: pb.LinkRequest) -> None:
        up = wire.Up([wire_submit(m) for m in msg.submits], list(msg.aborts))
        self._writer.write(wire.frame(msgspec.msgpack.encode(up)))
        await self._writer.drain()

    def cancel(self) -> None:
        self._writer.close()

    async def closed(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._writer.wait_closed(), 5)


@pytest.fixture(params=["grpc", "tcp"])
async def open_link(
    request: pytest.FixtureRequest, sidecar: Sidecar, stub: pb_grpc.EngineStub
) -> AsyncIterator[Callable[[], Awaitable[Any]]]:
    calls: list[Any] = []

    async def open_() -> Any:
        if request.param == "grpc":
            call: Any = stub.Link(metadata=LINK_METADATA)
        else:
            reader, writer = await asyncio.open_connection("127.0.0.1", sidecar.link_port)
            writer.write(wire.MAGIC)
            call = WireCall(reader, writer)
        calls.append(call)
        return call

    yield open_
    for call in calls:
        call.cancel()
        if isinstance(call, WireCall):
            await call.closed()


async def eventually(cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while True:
            if cond():
                return
            await asyncio.sleep(0.01)


def submit(
    key: int, max_tokens: int, prompt: str = "hello there", model: str = "sim-llama"
) -> pb.SubmitRequest:
    generation = params.Generation(
        request_id=f"r{key}",
        model=model,
        prompt=prompt,
        sampling=params.Sampling(max_tokens=max_tokens, ignore_eos=True),
    )
    return pb.SubmitRequest(key=key, generation=params.encode(generation))


async def read_until_finished(
    call: Any, keys: set[int]
) -> tuple[list[pb.LinkResponse], dict[int, list[pb.Delta]]]:
    messages: list[pb.LinkResponse] = []
    by_key: dict[int, list[pb.Delta]] = {k: [] for k in keys}
    open_keys = set(keys)
    async with asyncio.timeout(20):
        while open_keys:
            msg = await call.read()
            assert msg is not grpc.aio.EOF
            messages.append(msg)
            for d in msg.deltas:
                by_key[d.key].append(d)
                if d.finish:
                    open_keys.discard(d.key)
    return messages, by_key


async def test_link_announces_then_multiplexes_one_message_per_step(
    open_link: Callable[[], Awaitable[Any]],
) -> None:
    call = await open_link()
    first = await asyncio.wait_for(call.read(), 10)
    assert first.info.models[0].name == "sim-llama"
    assert first.info.max_num_seqs == 8
    assert first.load.ready
    await call.write(pb.LinkRequest(submits=[submit(k, 20) for k in (1, 2, 3)]))
    messages, by_key = await read_until_finished(call, {1, 2, 3})
    for deltas in by_key.values():
        assert sum(len(d.token_ids) for d in deltas) == 20
        assert deltas[0].prompt_tokens > 0
        assert deltas[-1].finish == pb.FINISH_LENGTH
        assert deltas[-1].completion_tokens == 20
    # Requests that advance together travel together: far fewer messages than deltas.
    data = [m for m in messages if m.deltas]
    assert max(len({d.key for d in m.deltas}) for m in data) == 3
    assert len(data) < sum(len(v) for v in by_key.values()) / 2
    call.cancel()


async def test_link_reports_errors_per_request(open_link: Callable[[], Awaitable[Any]]) -> None:
    call = await open_link()
    await asyncio.wait_for(call.read(), 10)
    bad = submit(7, 4, model="nope")
    await call.write(pb.LinkRequest(submits=[bad, submit(8, 0)]))
    _, by_key = await read_until_finished(call, {7, 8})
    assert by_key[7][-1].finish == pb.FINISH_ERROR
    assert by_key[7][-1].error_code == pb.ERROR_NOT_FOUND
    assert by_key[7][-1].error_field == "model"
    assert by_key[8][-1].error_code == pb.ERROR_INVALID_ARGUMENT
    assert by_key[8][-1].error_field == "max_tokens"
    call.cancel()


async def test_heartbeats_flow_while_idle(open_link: Callable[[], Awaitable[Any]]) -> None:
    call = await open_link()
    seqs = []
    async with asyncio.timeout(10):
        while len(seqs) < 5:
            msg = await call.read()
            if msg.HasField("load"):
                seqs.append(msg.load.seq)
    assert seqs == sorted(seqs) and len(set(seqs)) == 5
    call.cancel()


async def test_load_reports_carry_engine_progress_and_the_work_held(
    open_link: Callable[[], Awaitable[Any]], sidecar: Sidecar
) -> None:
    call = await open_link()
    first = await asyncio.wait_for(call.read(), 10)
    assert first.load.HasField("steps") and first.load.held == 0
    start = first.load.steps
    backend = sidecar.backend
    assert isinstance(backend, SimBackend)
    backend.set_faults(SimFaults(hang_after_tokens=first.load.generated_tokens + 10))
    await call.write(pb.LinkRequest(submits=[submit(1, 100)]))
    tokens = 0
    async with asyncio.timeout(10):
        while tokens < 10:
            msg = await call.read()
            tokens += sum(len(d.token_ids) for d in msg.deltas)
    # Hung, heartbeats going on: the request is held and the progress counter stands still.
    loads: list[pb.LoadReport] = []
    async with asyncio.timeout(10):
        while len(loads) < 4:
            msg = await call.read()
            assert not msg.deltas
            if msg.HasField("load"):
                loads.append(msg.load)
    assert {(m.held, m.running) for m in loads} == {(1, 1)}
    assert len({m.steps for m in loads}) == 1
    assert loads[0].steps >= start + 10  # a step per token at least
    backend.set_faults(SimFaults())  # unhung: it advances again, then holds nothing
    async with asyncio.timeout(10):
        while True:
            msg = await call.read()
            if msg.HasField("load") and msg.load.held == 0:
                break
    assert msg.load.steps >= loads[0].steps + 90
    call.cancel()


async def test_abort_and_closing_the_link_stop_engine_work(
    sidecar: Sidecar, open_link: Callable[[], Awaitable[Any]]
) -> None:
    call = await open_link()
    await asyncio.wait_for(call.read(), 10)
    await call.write(pb.LinkRequest(submits=[submit(1, 3000), submit(2, 3000)]))
    async with asyncio.timeout(10):
        while sidecar.backend.load().running < 2:
            await call.read()
        await call.write(pb.LinkRequest(aborts=[1]))
        while sidecar.backend.load().running != 1:
            await call.read()
    call.cancel()
    await eventually(lambda: sidecar.backend.load().running == 0)


async def test_generate_and_info_and_health(stub: pb_grpc.EngineStub, sidecar: Sidecar) -> None:
    deltas = [d async for d in stub.Generate(submit(0, 12), timeout=20)]
    assert sum(len(d.token_ids) for d in deltas) == 12
    assert deltas[-1].finish == pb.FINISH_LENGTH
    info = await stub.Info(pb.InfoRequest(), timeout=5)
    assert info.backend == "sim" and info.world_size == 1 and info.rank == 0
    with pytest.raises(grpc.aio.AioRpcError) as e:
        bad = submit(0, 4, model="nope")
        async for _ in stub.Generate(bad, timeout=5):
            pass
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    async with grpc.aio.insecure_channel(f"127.0.0.1:{sidecar.port}") as ch:
        health = health_pb2_grpc.HealthStub(ch)
        reply = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_graceful_stop_drains_in_flight_and_refuses_new_work() -> None:
    cfg = SidecarConfig(name="d", port=0, sim=SimConfig(profile="fast"))
    s = Sidecar(cfg)
    await s.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") as ch:
        stub = pb_grpc.EngineStub(ch)
        call = stub.Link(metadata=LINK_METADATA)
        await asyncio.wait_for(call.read(), 10)
        await call.write(pb.LinkRequest(submits=[submit(1, 200)]))
        await eventually(lambda: s.backend.load().running >= 1)
        stopping = asyncio.create_task(s.stop(20.0))
        await eventually(lambda: s.hub.draining)
        health = health_pb2_grpc.HealthStub(ch)
        reply = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
        await call.write(pb.LinkRequest(submits=[submit(2, 5)]))
        _, by_key = await read_until_finished(call, {1, 2})
        assert by_key[2][-1].error_code == pb.ERROR_UNAVAILABLE
        assert by_key[1][-1].finish == pb.FINISH_LENGTH
        assert sum(len(d.token_ids) for d in by_key[1]) == 200
        await asyncio.wait_for(stopping, 20)


async def test_set_faults_is_refused_unless_allowed(stub: pb_grpc.EngineStub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.SetFaults(pb.Faults(stop_heartbeats=True), timeout=5)
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_set_faults_stops_heartbeats_and_hangs_the_engine() -> None:
    cfg = SidecarConfig(
        name="f",
        port=0,
        heartbeat_interval_s=0.05,
        allow_fault_injection=True,
        sim=SimConfig(profile="fast"),
    )
    s = Sidecar(cfg)
    await s.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            stub = pb_grpc.EngineStub(ch)
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await stub.SetFaults(pb.Faults(error_rate=3.0), timeout=5)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            await stub.SetFaults(pb.Faults(stop_heartbeats=True, hang_after_tokens=10), timeout=5)
            call = stub.Link(metadata=LINK_METADATA)
            first = await asyncio.wait_for(call.read(), 10)
            assert first.HasField("info")
            opened = time.monotonic()
            await call.write(pb.LinkRequest(submits=[submit(1, 100)]))
            got: list[pb.LinkResponse] = []

            async def pump() -> None:
                while (msg := await call.read()) is not grpc.aio.EOF:
                    got.append(msg)

            def tokens(msgs: list[pb.LinkResponse]) -> int:
                return sum(len(d.token_ids) for m in msgs for d in m.deltas)

            reader = asyncio.create_task(pump())
            engine = s.backend
            assert isinstance(engine, SimBackend)
            await eventually(lambda: engine.hung and tokens(got) == 10)  # hung after 10
            # What is asserted of the hang holds over a window of 10 heartbeat intervals.
            await eventually(lambda: time.monotonic() - opened >= 10 * 0.05)
            hung = len(got)
            assert not any(m.HasField("load") for m in got)
            assert tokens(got) == 10
            await stub.SetFaults(pb.Faults(), timeout=5)  # clear: heartbeats and tokens resume

            def resumed() -> bool:
                after = got[hung:]
                finished = any(d.finish for m in after for d in m.deltas)
                return finished and any(m.HasField("load") for m in after)

            await eventually(resumed, 20)
            assert tokens(got[hung:]) == 90
            await tasks.stop(reader)
            call.cancel()
    finally:
        await s.stop(0.5)


async def test_sidecar_serves_vllm_style_metrics() -> None:
    s = Sidecar(SidecarConfig(name="m", port=0, metrics_port=0, sim=SimConfig(profile="fast")))
    await s.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            deltas = [d async for d in pb_grpc.EngineStub(ch).Generate(submit(0, 7), timeout=20)]
            assert sum(len(d.token_ids) for d in deltas) == 7
        reader, writer = await asyncio.open_connection("127.0.0.1", s.metrics_port)
        writer.write(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        raw = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        await writer.wait_closed()
        text = raw.partition(b"\r\n\r\n")[2].decode()
        assert 'vllm:generation_tokens_total{model_name="sim-llama"} 7.0' in text
        assert 'vllm:num_requests_running{model_name="sim-llama"} 0.0' in text
        assert "vllm:kv_cache_usage_perc" in text
    finally:
        await s.stop(0.5)
