"""Watches the engine server: /health every health interval, /metrics every metrics interval.

The server counts as dead after `unhealthy_after` failed health checks in a row (each with its
own deadline), or at once when a request could not reach it; alive again once a check passes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import aiohttp

from engine_sidecar.backends.openai.client import EngineClient, ServerRefused
from engine_sidecar.backends.openai.config import OpenAIConfig
from engine_sidecar.backends.openai.load import ServerLoad, parse_metrics
from gateway import tasks

log = logging.getLogger(__name__)

_FAILURES = (aiohttp.ClientError, OSError, TimeoutError, ServerRefused)


class Monitor:
    def __init__(self, client: EngineClient, config: OpenAIConfig) -> None:
        self._client = client
        self._config = config
        self.failures = 0
        self.load = ServerLoad()
        self.has_metrics = True
        self._seen_up = False  # (no error logged for a server that has not started yet)
        self._task: asyncio.Task[None] | None = None
        # Called when a server that died answers again (a restarted server: a new engine).
        self.on_back: Callable[[], None] | None = None

    @property
    def alive(self) -> bool:
        return self.failures < self._config.unhealthy_after

    def unreachable(self) -> None:
        """A request could not reach the server: dead now, until a health check passes."""
        if self.alive:
            log.error("engine server %s is unreachable", self._config.url)
        self.failures = max(self.failures, self._config.unhealthy_after)

    async def check(self) -> bool:
        try:
            await self._client.get("/health", self._config.health_timeout_s)
        except _FAILURES:
            if self._seen_up and self.alive and self.failures + 1 >= self._config.unhealthy_after:
                log.error("engine server %s stopped answering /health", self._config.url)
            self.failures += 1
            return False
        if not self.alive and self._seen_up:
            log.info("engine server %s answers again", self._config.url)
            if self.on_back is not None:
                self.on_back()
        self.failures = 0
        self._seen_up = True
        return True

    async def wait_ready(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not await self.check():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(min(self._config.health_interval_s, 0.5))
        return True

    async def scrape(self) -> None:
        if not self.has_metrics:
            return
        try:
            text = await self._client.get("/metrics")
        except ServerRefused:
            self.has_metrics = False  # (a server without /metrics: the sidecar counts itself)
            return
        except (aiohttp.ClientError, OSError, TimeoutError):
            return  # the health checks tell
        self.load = parse_metrics(text.decode("utf-8", "replace"))

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="openai-monitor")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await tasks.stop(task)

    async def _run(self) -> None:
        c = self._config
        next_scrape = 0.0
        while True:
            await self.check()
            now = time.monotonic()
            if now >= next_scrape and self.alive:
                await self.scrape()
                next_scrape = now + c.metrics_interval_s
            await asyncio.sleep(c.health_interval_s)
