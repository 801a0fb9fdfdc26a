"""Engine death in the vLLM backend, with a stand-in AsyncLLM (the shared real engine must live
on for the other tests): a dead engine turns the backend, and so the sidecar, unhealthy at once,
and its requests end with UNAVAILABLE."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engine_sidecar.backend import ErrorCode, Finish, RequestError
from engine_sidecar.config import SidecarConfig
from engine_sidecar.server import Sidecar
from tests.contract.harness import Caps, Harness
from tests.engines import require, vllm_config

pytestmark = pytest.mark.timeout(120)


class DyingLLM:
    """Streams one token, then dies as vLLM's AsyncLLM does (EngineDeadError, errored)."""

    def __init__(self) -> None:
        self.errored = False
        self.release = asyncio.Event()

    async def generate(
        self, prompt: Any, params: Any, request_id: str, **kw: Any
    ) -> AsyncIterator[Any]:
        from vllm.v1.engine.exceptions import EngineDeadError

        out = SimpleNamespace(
            outputs=[SimpleNamespace(token_ids=[7], text="x", finish_reason=None, logprobs=None)],
            finished=False,
            num_cached_tokens=0,
            prompt_logprobs=None,  # (a RequestOutput's fields this one needs)
        )
        yield out
        await self.release.wait()
        self.errored = True
        raise EngineDeadError()


def dying_engine(tiny_model_dir: Path) -> Any:
    require("vllm")
    from engine_sidecar.backends.common.tokenizer import HfTokenizer
    from engine_sidecar.backends.vllm.engine import Engine
    from engine_sidecar.backends.vllm.stats import LoadState

    tokenizer = HfTokenizer.from_pretrained(str(tiny_model_dir))
    return Engine(DyingLLM(), LoadState(), tokenizer, max_model_len=512, max_num_seqs=4)


async def test_engine_death_ends_requests_and_health(tiny_model_dir: Path) -> None:
    from engine_sidecar.backends.vllm.backend import VllmBackend

    engine = dying_engine(tiny_model_dir)
    backend = VllmBackend(vllm_config(tiny_model_dir), engine=engine)
    h = Harness("vllm", backend, "tiny-llama", Caps())
    await backend.start(h.collector.sink)
    key = h.submit(max_tokens=8)
    await h.collector.first(key)
    assert backend.healthy()
    engine.llm.release.set()
    deltas = await h.collector.finished(key)
    assert deltas[-1].finish is Finish.ERROR
    assert deltas[-1].error_code is ErrorCode.UNAVAILABLE
    assert deltas[-1].completion_tokens == 1
    assert not backend.healthy()
    assert not backend.load().ready
    with pytest.raises(RequestError) as e:
        h.submit()
    assert e.value.code is ErrorCode.UNAVAILABLE
    await backend.stop()


async def test_a_dead_engine_turns_the_sidecar_not_serving(tiny_model_dir: Path) -> None:
    from engine_sidecar.backends.vllm.backend import VllmBackend

    engine = dying_engine(tiny_model_dir)
    vllm = vllm_config(tiny_model_dir)
    config = SidecarConfig(name="dying", port=0, backend="vllm", vllm=vllm)
    sidecar = Sidecar(config, backend=VllmBackend(vllm, engine=engine))
    await sidecar.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{sidecar.port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            check = health_pb2.HealthCheckRequest(service="")

            async def status() -> Any:
                return (await stub.Check(check, timeout=5.0)).status

            assert await status() == health_pb2.HealthCheckResponse.SERVING
            engine.llm.errored = True
            async with asyncio.timeout(30.0):
                while await status() != health_pb2.HealthCheckResponse.NOT_SERVING:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
    finally:
        await sidecar.stop(0.5)
