"""The TCP link (shardgate/v1/wire.py): which transport the gateway picks, and what either side
does with a peer that breaks the protocol or goes silent."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import msgspec
import openai
import pytest
from shardgate.v1 import engine_pb2 as pb
from shardgate.v1 import engine_pb2_grpc as pb_grpc
from shardgate.v1 import wire
from shardgate.v1.params import PROTOCOL_METADATA, PROTOCOL_VERSION

from engine_sidecar.backends.sim import SimConfig
from engine_sidecar.config import SidecarConfig
from engine_sidecar.server import Sidecar
from gateway.config.schema import LinkSettings
from gateway.upstream import tcp_link
from gateway.upstream.link import EngineLink
from tests.integration.cluster import Cluster

SIM = SimConfig(model="sim-llama", profile="fast")


def stream_text(cluster: Cluster, max_tokens: int = 12) -> str:
    client = openai.OpenAI(base_url=f"{cluster.http_url}/v1", api_key="none", max_retries=0)
    chunks = client.chat.completions.create(
        model="sim-llama",
        messages=[{"role": "user", "content": "which way?"}],
        max_tokens=max_tokens,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    pieces = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert len(pieces) == max_tokens
    return "".join(pieces)


@pytest.mark.parametrize(
    ("gateway_yaml", "link_port", "expect"),
    [
        ("gateway: {}", 0, "tcp"),
        ("gateway: {link: {transport: grpc}}", 0, "grpc"),
        ("gateway: {}", -1, "grpc"),
    ],
)
def test_gateway_takes_the_tcp_link_when_the_sidecar_announces_one(
    gateway_yaml: str, link_port: int, expect: str
) -> None:
    c = Cluster(gateway_yaml, [{"sim": SIM, "link_port": link_port}] * 2)
    c.start()
    try:
        text = stream_text(c)
        assert text
        assert c.gateway is not None
        links = c.gateway.fleet.links
        assert [link.transport for link in links] == [expect, expect]
        tcp_open = sum(s.tcp_link.open for s in c.sidecars)
        grpc_open = sum(s.servicer.links for s in c.sidecars)
        assert (tcp_open, grpc_open) == ((2, 0) if expect == "tcp" else (0, 2))
    finally:
        c.stop()


# -- the sidecar's side ----------------------------------------------------------------------
@pytest.fixture
async def sidecar() -> AsyncIterator[Sidecar]:
    s = Sidecar(SidecarConfig(name="t", port=0, heartbeat_interval_s=0.05, sim=SIM))
    await s.start()
    yield s
    await s.stop(0.5)


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(writer.wait_closed(), 5)


async def closed_by_peer(reader: asyncio.StreamReader) -> bool:
    """Reads until EOF (the peer closed the connection); False if it stays open for 5 s."""
    try:
        async with asyncio.timeout(5):
            while await reader.read(1 << 16):
                pass
    except TimeoutError:
        return False
    return True


@pytest.mark.parametrize(
    "payload",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",  # not a link at all
        wire.MAGIC + (1 << 31).to_bytes(4, "little"),  # a frame over the size limit
        wire.MAGIC + wire.frame(b"\xc1 not msgpack"),  # a body that does not decode
        wire.MAGIC + wire.frame(msgspec.msgpack.encode([[b"\x08"], []])),  # a submit of bad shape
        wire.MAGIC_PREFIX + bytes([PROTOCOL_VERSION + 1]),  # a gateway of another version
        b"SGL1",  # the first version of the link
    ],
)
async def test_sidecar_ends_a_connection_that_breaks_the_protocol(
    sidecar: Sidecar, payload: bytes
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", sidecar.link_port)
    writer.write(payload)
    assert await closed_by_peer(reader)
    await close(writer)
    # The sidecar is unharmed: a proper link still gets its announcement.
    reader, writer = await asyncio.open_connection("127.0.0.1", sidecar.link_port)
    writer.write(wire.MAGIC)
    frames = wire.FrameReader()
    async with asyncio.timeout(5):
        got: list[bytes] = []
        while not got:
            got = frames.feed(await reader.read(1 << 16))
    first = msgspec.msgpack.decode(got[0], type=wire.Down)
    assert pb.InfoReply.FromString(first.info).models[0].name == "sim-llama"
    await close(writer)


# -- the gateway's side ----------------------------------------------------------------------
def announcement(version: int = PROTOCOL_VERSION) -> bytes:
    info = pb.InfoReply(
        sidecar_id="fake-1", backend="sim", max_num_seqs=4, protocol_version=version
    )
    info.models.add(name="sim-llama", max_model_len=4096)
    load = pb.LoadReport(seq=1, max_num_seqs=4, ready=True)
    down = wire.Down(info=info.SerializeToString(), load=load.SerializeToString())
    return wire.frame(msgspec.msgpack.encode(down))


Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def run_against(script: Script, heartbeat_timeout_s: float = 5.0) -> BaseException:
    """Runs one gateway session against a fake sidecar; returns how the session ended."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await script(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    settings = LinkSettings(connect_timeout_s=2.0, heartbeat_timeout_s=heartbeat_timeout_s)
    link = EngineLink("fake", f"127.0.0.1:{port}", settings)
    try:
        async with asyncio.timeout(10):
            await tcp_link.run(link, "127.0.0.1", port)
    except Exception as e:
        return e
    finally:
        server.close()
        await server.wait_closed()
    raise AssertionError("the session should have ended with an error")


async def test_gateway_ends_a_link_that_sends_garbage() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert await reader.readexactly(4) == wire.MAGIC
        writer.write(announcement() + wire.frame(b"\xc1\xc1"))
        await asyncio.sleep(5)

    error = await run_against(script)
    assert isinstance(error, ConnectionError)
    assert "bad data" in str(error)


@pytest.mark.parametrize("version", [0, PROTOCOL_VERSION + 1])
async def test_gateway_refuses_a_sidecar_of_another_protocol_version(version: int) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert await reader.readexactly(4) == wire.MAGIC
        writer.write(announcement(version))
        await asyncio.sleep(5)

    error = await run_against(script)
    assert isinstance(error, ConnectionError)
    assert f"speaks link protocol {version or 1}, this gateway {PROTOCOL_VERSION}" in str(error)


async def test_sidecar_refuses_a_grpc_link_of_another_protocol_version(sidecar: Sidecar) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{sidecar.port}") as channel:
        stub = pb_grpc.EngineStub(channel)
        for metadata in ((), ((PROTOCOL_METADATA, str(PROTOCOL_VERSION + 1)),)):
            call = stub.Link(metadata=metadata, timeout=10)
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await call.read()
            assert e.value.code() is grpc.StatusCode.FAILED_PRECONDITION
            assert "link protocol" in str(e.value.details())
        call = stub.Link(metadata=((PROTOCOL_METADATA, str(PROTOCOL_VERSION)),), timeout=10)
        first = await call.read()  # the right version: the sidecar announces itself
        assert first.info.protocol_version == PROTOCOL_VERSION
        call.cancel()


async def test_gateway_refuses_a_peer_that_does_not_announce_itself() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        down = wire.Down(deltas=[wire.WireDelta(1, [5], "x")])
        writer.write(wire.frame(msgspec.msgpack.encode(down)))
        await asyncio.sleep(5)

    error = await run_against(script)
    assert isinstance(error, ConnectionError)
    assert "announce" in str(error)


async def test_gateway_ends_a_link_that_goes_silent() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(announcement())
        await asyncio.sleep(5)  # alive but silent: no deltas, no heartbeats

    error = await run_against(script, heartbeat_timeout_s=0.3)
    assert isinstance(error, TimeoutError)
    assert "no message" in str(error)


async def test_gateway_link_delivers_frames_split_anywhere() -> None:
    """Deltas split across reads at every byte still reach their request, in order."""
    got: list[Any] = []

    class Target:
        def push(self, delta: Any) -> None:
            got.append(delta)

        def fail(self, error: Any) -> None:
            got.append(error)

    deltas = [wire.WireDelta(1, [i], f"t{i}") for i in range(5)]
    deltas.append(wire.WireDelta(1, [], "", pb.FINISH_LENGTH, 3, 0, 5))
    stream = announcement() + b"".join(
        wire.frame(msgspec.msgpack.encode(wire.Down(deltas=[d]))) for d in deltas
    )

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for i in range(len(stream)):
            writer.write(stream[i : i + 1])
            await writer.drain()
            await asyncio.sleep(0)
        await asyncio.sleep(0.2)
        writer.close()

    server = await asyncio.start_server(script, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    link = EngineLink("fake", f"127.0.0.1:{port}", LinkSettings())
    link.streams[1] = Target()
    with pytest.raises(ConnectionError, match="closed the link"):
        async with asyncio.timeout(10):
            await tcp_link.run(link, "127.0.0.1", port)
    server.close()
    await server.wait_closed()
    assert [d.text for d in got] == ["t0", "t1", "t2", "t3", "t4", ""]
    assert got[-1].completion_tokens == 5 and got[-1].prompt_tokens == 3
    assert link.info is not None and link.info.sidecar_id == "fake-1"


async def test_gateway_falls_back_to_grpc_when_the_tcp_link_is_unreachable(
    sidecar: Sidecar,
) -> None:
    await sidecar.tcp_link.stop()  # still announced in Info, but nothing listens any more
    link = EngineLink("t", f"127.0.0.1:{sidecar.port}", LinkSettings(connect_timeout_s=2.0))
    link.start()
    try:
        assert await link.wait_connected(10)
        assert link.transport == "grpc"
        assert sidecar.servicer.links == 1
    finally:
        await link.close()
