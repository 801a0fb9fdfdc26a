"""Starting an in-process vLLM engine: AsyncLLM with the sidecar's stat logger.

An `Engine` may serve several VllmBackends in one process (the tests share one engine), each
with its own sink; a backend stops only the engine it started itself.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine_sidecar.backends.common.tokenizer import HfTokenizer
from engine_sidecar.backends.vllm.args import engine_kwargs
from engine_sidecar.backends.vllm.config import VllmConfig
from engine_sidecar.backends.vllm.logs import confine_vllm_log_records
from engine_sidecar.backends.vllm.stats import LoadLogger, LoadState

# Builds AsyncLLM from AsyncEngineArgs keyword arguments and stat logger factories.
EngineFactory = Callable[[dict[str, Any], list[Any]], Any]


def build_async_llm(kwargs: dict[str, Any], stat_loggers: list[Any]) -> Any:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    return AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs), stat_loggers=stat_loggers)


@dataclass(slots=True)
class Engine:
    llm: Any  # vllm.v1.engine.async_llm.AsyncLLM
    state: LoadState
    tokenizer: HfTokenizer
    max_model_len: int
    max_num_seqs: int

    @property
    def errored(self) -> bool:
        return self.llm is None or bool(self.llm.errored)

    def shutdown(self, timeout_s: float) -> None:
        """Stop the engine's processes; the engine counts as dead afterwards."""
        llm, self.llm = self.llm, None
        if llm is not None:
            llm.shutdown(timeout=timeout_s)


async def start_engine(
    config: VllmConfig,
    *,
    rank: int = 0,
    world_size: int = 1,
    factory: EngineFactory = build_async_llm,
) -> Engine:
    """Start-up takes tens of seconds (processes, model load, KV cache): it runs off the loop."""
    os.environ.update(config.env)
    kwargs = engine_kwargs(config, rank=rank, world_size=world_size)
    state = LoadState()
    loggers = [functools.partial(LoadLogger, state=state)]
    llm = await asyncio.to_thread(factory, kwargs, loggers)
    confine_vllm_log_records()
    return Engine(
        llm=llm,
        state=state,
        tokenizer=HfTokenizer(llm.get_tokenizer()),
        max_model_len=int(llm.model_config.max_model_len),
        max_num_seqs=int(llm.vllm_config.scheduler_config.max_num_seqs),
    )
