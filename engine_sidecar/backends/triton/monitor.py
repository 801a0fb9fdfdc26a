"""Watches one Triton model: readiness every health interval, statistics every stats interval.

Each call has its own deadline (TritonClient's rpc timeout). The model counts as dead after
`unhealthy_after` failed readiness checks in a row, and alive again once a check passes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from engine_sidecar.backends.triton.client import TritonClient
from engine_sidecar.backends.triton.config import TritonConfig
from gateway import tasks

log = logging.getLogger(__name__)


class Monitor:
    def __init__(self, client: TritonClient, config: TritonConfig) -> None:
        self._client = client
        self._config = config
        self.ready = False
        self.failures = 0
        self.cache_hits = 0
        self.cache_misses = 0
        self.success = 0
        self.fail = 0
        self._task: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        return self.failures < self._config.unhealthy_after

    async def wait_ready(self, timeout_s: float) -> bool:
        """Poll readiness until it passes or `timeout_s` is over."""
        deadline = time.monotonic() + timeout_s
        while True:
            await self.check()
            if self.ready or time.monotonic() >= deadline:
                return self.ready
            await asyncio.sleep(min(self._config.health_interval_s, 0.5))

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="triton-monitor")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await tasks.stop(task)

    async def check(self) -> None:
        ready = await self._client.ready()
        if ready != self.ready:
            log.info("Triton model %s is %sready", self._client.model, "" if ready else "not ")
        self.ready = ready
        self.failures = 0 if ready else self.failures + 1

    async def _run(self) -> None:
        c = self._config
        next_stats = 0.0
        while True:
            await self.check()
            now = time.monotonic()
            if self.ready and now >= next_stats:
                next_stats = now + c.stats_interval_s
                await self._read_stats()
            await asyncio.sleep(c.health_interval_s)

    async def _read_stats(self) -> None:
        try:
            reply = await self._client.statistics()
        except Exception as e:
            log.debug("Triton statistics failed: %s", e)
            return
        self._apply(reply)

    def _apply(self, reply: Any) -> None:
        """Totals over the model's versions."""
        stats = [m.inference_stats for m in reply.model_stats]
        self.success = sum(int(s.success.count) for s in stats)
        self.fail = sum(int(s.fail.count) for s in stats)
        self.cache_hits = sum(int(s.cache_hit.count) for s in stats)
        self.cache_misses = sum(int(s.cache_miss.count) for s in stats)

    @property
    def cache_hit_rate(self) -> float:
        total = self.cache_hits + self.cache_misses
        return self.cache_hits / total if total else 0.0
