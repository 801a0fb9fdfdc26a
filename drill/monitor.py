"""Samples the gateway's view of the fleet (replica states, routable replicas) on a fixed period,
for the timeline of each fault, and waits on it."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Callable, Sequence

import aiohttp

from drill import scrape
from drill.timeline import Sample

log = logging.getLogger(__name__)


class Monitor:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        model: str,
        interval_s: float = 0.05,
        max_samples: int = 200_000,
    ) -> None:
        self._session = session
        self._base_url = base_url
        self._model = model
        self._interval_s = interval_s
        self.samples: collections.deque[Sample] = collections.deque(maxlen=max_samples)
        self.failures = 0
        self._task: asyncio.Task[None] | None = None
        self._new = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="drill-monitor")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            started = time.monotonic()
            try:
                sample = await self.sample()
            except (TimeoutError, aiohttp.ClientError, OSError, ValueError):
                self.failures += 1  # the gateway is not up (yet), or too busy to answer
            else:
                self.samples.append(sample)
                self._new.set()
                self._new = asyncio.Event()
            await asyncio.sleep(max(0.0, started + self._interval_s - time.monotonic()))

    async def sample(self, timeout_s: float = 2.0) -> Sample:
        metrics, ready = await asyncio.gather(
            scrape.fetch_metrics(self._session, self._base_url, timeout_s),
            scrape.fetch_readyz(self._session, self._base_url, timeout_s),
        )
        return Sample(
            time.monotonic(),
            scrape.replica_states(metrics),
            scrape.routable_replicas(ready, self._model),
        )

    def window(self, since: float, until: float | None = None) -> list[Sample]:
        end = until if until is not None else float("inf")
        return [s for s in self.samples if since <= s.t <= end]

    async def wait_for(self, pred: Callable[[Sequence[Sample]], bool], timeout_s: float) -> bool:
        """Until `pred(samples)` holds after a new sample; False after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while not pred(self.samples):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new.wait(), min(left, 1.0))
        return True
