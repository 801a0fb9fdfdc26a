"""A rank above 0 of a vLLM shard group runs workers only (with a stand-in executor here)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from engine_sidecar.backend import ErrorCode, RequestError
from engine_sidecar.backends.vllm import VllmConfig
from engine_sidecar.backends.vllm.headless import HeadlessWorkers
from engine_sidecar.config import SidecarConfig
from engine_sidecar.server import make_backend


async def test_workers_take_no_requests_and_report_their_health() -> None:
    started: list[dict[str, Any]] = []
    executor = SimpleNamespace(is_failed=False, shutdown=lambda: None)

    def factory(kwargs: dict[str, Any]) -> Any:
        started.append(kwargs)
        return executor

    config = VllmConfig(model="m", pipeline_parallel_size=2, max_model_len=4096)
    workers = HeadlessWorkers(config, rank=1, world_size=2, factory=factory)
    await workers.start(lambda deltas: None)
    assert (started[0]["nnodes"], started[0]["node_rank"]) == (2, 1)
    assert workers.info().models[0].name == "m"
    assert workers.healthy() and workers.load().ready
    with pytest.raises(RequestError) as e:
        workers.submit(SimpleNamespace())  # type: ignore[arg-type]
    assert e.value.code is ErrorCode.UNAVAILABLE
    executor.is_failed = True
    assert not workers.healthy()
    await workers.stop()


def test_the_sidecar_picks_workers_for_rank_one() -> None:
    vllm = VllmConfig(model="m")
    config = SidecarConfig(backend="vllm", vllm=vllm, group="g", rank=1, world_size=2)
    assert isinstance(make_backend(config), HeadlessWorkers)
