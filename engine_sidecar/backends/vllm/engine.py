"""Starting an in-process vLLM engine: AsyncLLM with the sidecar's stat logger.

An `Engine` may serve several VllmBackends in one process (the tests share one engine), each
with its own sink; a backend stops only the engine it started itself.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine_sidecar.backends.common.kv_events import BlockNamer, KvSubscriber
from engine_sidecar.backends.common.tokenizer import HfTokenizer
from engine_sidecar.backends.vllm.args import engine_kwargs, reports_kv
from engine_sidecar.backends.vllm.config import VllmConfig
from engine_sidecar.backends.vllm.logs import confine_vllm_log_records
from engine_sidecar.backends.vllm.stats import LoadLogger, LoadState
from engine_sidecar.kv_mirror import KvMirror

# Builds AsyncLLM from AsyncEngineArgs keyword arguments and stat logger factories.
EngineFactory = Callable[[dict[str, Any], list[Any]], Any]


def build_async_llm(kwargs: dict[str, Any], stat_loggers: list[Any]) -> Any:
    from vllm.config.kv_events import KVEventsConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    kv = kwargs.get("kv_events_config")
    if isinstance(kv, dict):
        kwargs = {**kwargs, "kv_events_config": KVEventsConfig(**kv)}
    return AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs), stat_loggers=stat_loggers)


@dataclass(slots=True)
class Engine:
    llm: Any  # vllm.v1.engine.async_llm.AsyncLLM
    state: LoadState
    tokenizer: HfTokenizer
    max_model_len: int
    max_num_seqs: int
    # What its prefix cache holds, from its KV events (None: not reported).
    kv: KvMirror | None = None
    kv_subscriber: KvSubscriber | None = None
    kv_task: asyncio.Task[None] | None = None
    kv_dir: str | None = None  # (its sockets' directory)

    @property
    def errored(self) -> bool:
        return self.llm is None or bool(self.llm.errored)

    def shutdown(self, timeout_s: float) -> None:
        """Stop the engine's processes; the engine counts as dead afterwards."""
        llm, self.llm = self.llm, None
        task, self.kv_task = self.kv_task, None
        if task is not None:
            task.cancel()
        if llm is not None:
            llm.shutdown(timeout=timeout_s)
        if self.kv_dir is not None:
            shutil.rmtree(self.kv_dir, ignore_errors=True)


async def start_engine(
    config: VllmConfig,
    *,
    rank: int = 0,
    world_size: int = 1,
    factory: EngineFactory = build_async_llm,
) -> Engine:
    """Start-up takes tens of seconds (processes, model load, KV cache): it runs off the loop."""
    os.environ.update(config.env)
    kv_dir = tempfile.mkdtemp(prefix="shardgate-kv-") if reports_kv(config) else None
    endpoints = (f"ipc://{kv_dir}/events", f"ipc://{kv_dir}/replay") if kv_dir else None
    kwargs = engine_kwargs(config, rank=rank, world_size=world_size, kv_endpoints=endpoints)
    state = LoadState()
    loggers = [functools.partial(LoadLogger, state=state)]
    try:
        llm = await asyncio.to_thread(factory, kwargs, loggers)
    except BaseException:
        if kv_dir is not None:
            shutil.rmtree(kv_dir, ignore_errors=True)
        raise
    confine_vllm_log_records()
    engine = Engine(
        llm=llm,
        state=state,
        tokenizer=HfTokenizer(llm.get_tokenizer()),
        max_model_len=int(llm.model_config.max_model_len),
        max_num_seqs=int(llm.vllm_config.scheduler_config.max_num_seqs),
        kv_dir=kv_dir,
    )
    if endpoints is not None:
        block_size = int(llm.vllm_config.cache_config.block_size)
        engine.kv = KvMirror(block_size)
        sub = KvSubscriber(BlockNamer(config.served_name, engine.kv), *endpoints)
        engine.kv_subscriber = sub
        task = engine.kv_task = asyncio.create_task(sub.run(), name="vllm-kv-events")
        waiter = asyncio.ensure_future(sub.connected.wait())
        try:  # (subscribed before the first request runs)
            async with asyncio.timeout(10):
                await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                task.result()  # (raises what ended it)
                raise RuntimeError("the KV event subscriber ended at start")
        except BaseException:
            engine.shutdown(config.shutdown_timeout_s)
            raise
        finally:
            waiter.cancel()
    return engine
