"""A rank above 0 of a multi-node vLLM shard group: worker processes only, no requests.

With `world_size` sidecars in one shard group (pipeline or tensor parallel across nodes), rank
0 runs the engine (VllmBackend, with nnodes/node_rank) and takes every request; each other
rank runs vLLM's headless workers for its share of the model, and is healthy while they live
(the gateway routes to the group only while every rank is healthy).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from engine_sidecar.backend import (
    BackendInfo,
    DeltaSink,
    EngineRequest,
    ErrorCode,
    LoadSnapshot,
    ModelCard,
    RequestError,
)
from engine_sidecar.backends.vllm.args import engine_kwargs
from engine_sidecar.backends.vllm.config import VllmConfig

# Builds and starts the worker executor from AsyncEngineArgs keyword arguments.
WorkersFactory = Callable[[dict[str, Any]], Any]


def start_workers(kwargs: dict[str, Any]) -> Any:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.executor.multiproc_executor import MultiprocExecutor

    vllm_config = AsyncEngineArgs(**kwargs).create_engine_config(headless=True)
    executor = MultiprocExecutor(vllm_config, monitor_workers=False)
    executor.start_worker_monitor()
    return executor


class HeadlessWorkers:
    def __init__(
        self,
        config: VllmConfig,
        *,
        rank: int,
        world_size: int,
        factory: WorkersFactory = start_workers,
    ) -> None:
        self.config = config
        self._rank = rank
        self._world_size = world_size
        self._factory = factory
        self._executor: Any = None

    def info(self) -> BackendInfo:
        c = self.config
        card = ModelCard(c.served_name, c.max_model_len or 0, tuple(sorted(c.loras)))
        extra = {"engine": "vllm", "role": f"headless rank {self._rank}/{self._world_size}"}
        return BackendInfo("vllm", (card,), c.max_num_seqs, extra)

    async def start(self, sink: DeltaSink) -> None:
        kwargs = engine_kwargs(self.config, rank=self._rank, world_size=self._world_size)
        self._executor = await asyncio.to_thread(self._factory, kwargs)

    async def stop(self) -> None:
        executor, self._executor = self._executor, None
        if executor is not None:
            await asyncio.to_thread(executor.shutdown)

    def submit(self, request: EngineRequest) -> None:
        raise RequestError(
            ErrorCode.UNAVAILABLE, f"rank {self._rank} of a shard group takes no requests"
        )

    def abort(self, key: int) -> None:
        pass

    def load(self) -> LoadSnapshot:
        ready = self._executor is not None and self.healthy()
        return LoadSnapshot(0, 0, 0.0, self.config.max_num_seqs, ready=ready)

    def healthy(self) -> bool:
        executor = self._executor
        return executor is None or not executor.is_failed
