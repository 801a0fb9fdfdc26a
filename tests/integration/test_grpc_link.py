"""The gRPC Link's session: its writer and its reader end it together. A writer that dies
takes the link down (its requests then migrate) instead of leaving a link that reads
heartbeats and sends nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest
from shardgate.v1 import engine_pb2 as pb

from engine_sidecar.backends.sim import SimConfig
from engine_sidecar.config import SidecarConfig
from engine_sidecar.server import Sidecar
from gateway.config.schema import LinkSettings
from gateway.types import Delta, GatewayError, GenerationRequest, Sampling
from gateway.upstream import convert, grpc_link
from gateway.upstream.link import EngineLink


@pytest.fixture
async def sidecar() -> AsyncIterator[Sidecar]:
    s = Sidecar(
        SidecarConfig(name="g", port=0, heartbeat_interval_s=0.05, sim=SimConfig(model="sim-llama"))
    )
    await s.start()
    yield s
    await s.stop(0.5)


class Target:
    def __init__(self) -> None:
        self.got: list[Delta] = []
        self.errors: list[GatewayError] = []
        self.finished = asyncio.Event()

    def push(self, delta: Delta) -> None:
        self.got.append(delta)
        if delta.finish:
            self.finished.set()

    def fail(self, error: GatewayError) -> None:
        self.errors.append(error)


def request(rid: str) -> GenerationRequest:
    return GenerationRequest(rid, "sim-llama", Sampling(max_tokens=4, ignore_eos=True), "hi")


async def test_a_writer_that_dies_ends_the_session(
    sidecar: Sidecar, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = convert.to_submit

    def to_submit(req: GenerationRequest, key: int, resume: Sequence[int] = ()) -> pb.SubmitRequest:
        if req.request_id == "poison":
            raise RuntimeError("the writer broke")
        return real(req, key, resume)

    monkeypatch.setattr(grpc_link.convert, "to_submit", to_submit)
    link = EngineLink("g", f"127.0.0.1:{sidecar.port}", LinkSettings(heartbeat_timeout_s=5.0))
    session = asyncio.create_task(grpc_link.run(link))
    assert await link.wait_connected(10)
    ok = Target()
    link.submit(request("fine"), ok)  # the link works before
    await asyncio.wait_for(ok.finished.wait(), 10)
    link.submit(request("poison"), Target())
    with pytest.raises(RuntimeError, match="the writer broke"):
        async with asyncio.timeout(10):  # heartbeats keep coming: only the writer's end ends it
            await session
