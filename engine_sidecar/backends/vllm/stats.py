"""Load reports from inside the engine: an in-process vLLM stat logger.

vLLM calls `record` on the event loop after every engine step with the scheduler's stats; the
logger keeps the latest figures in a LoadState that the backend's `load()` reads. Each call is
one engine step's outputs (the engine core sends its stats with every step, outputs or not, and
steps only while it holds requests): their count is the engine's progress.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase


@dataclass(slots=True)
class LoadState:
    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0
    preemptions: int = 0
    generated_tokens: int = 0
    steps: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0

    @property
    def prefix_hit_rate(self) -> float:
        return self.prefix_hits / self.prefix_queries if self.prefix_queries else 0.0


class LoadLogger(StatLoggerBase):  # type: ignore[misc]
    def __init__(self, vllm_config: Any, engine_index: int = 0, *, state: LoadState) -> None:
        self.state = state

    def record(
        self,
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
    ) -> None:
        s = self.state
        s.steps += 1
        if scheduler_stats is not None:
            s.running = int(scheduler_stats.num_running_reqs)
            s.waiting = int(scheduler_stats.num_waiting_reqs)
            s.kv_usage = float(scheduler_stats.kv_cache_usage)
            prefix = scheduler_stats.prefix_cache_stats
            if prefix is not None:
                s.prefix_queries += int(prefix.queries)
                s.prefix_hits += int(prefix.hits)
        if iteration_stats is not None:
            s.generated_tokens += int(iteration_stats.num_generation_tokens)
            s.preemptions += int(iteration_stats.num_preempted_reqs)

    def log_engine_initialized(self) -> None:
        pass
