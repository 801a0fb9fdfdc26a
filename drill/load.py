"""A steady streaming load: `concurrency` workers, each sending the next of a fixed set of
distinct requests as soon as its previous one ended, until told to stop."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Sequence

import aiohttp

from drill.client import stream_one
from drill.requests import RequestRecord, RequestSpec


class Load:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        model: str,
        specs: Sequence[RequestSpec],
        concurrency: int,
        request_timeout_s: float,
    ) -> None:
        if concurrency <= 0:
            raise ValueError("concurrency must be > 0")
        self._session = session
        self._base_url = base_url
        self._model = model
        self._specs = specs
        self._concurrency = concurrency
        self._timeout_s = request_timeout_s
        self._next = itertools.cycle(range(len(specs)))
        self._stop = asyncio.Event()
        self._workers: list[asyncio.Task[None]] = []
        self._current: dict[int, int] = {}  # worker -> the request it is on
        self.records: list[RequestRecord] = []

    async def once_each(self) -> list[RequestRecord]:
        """Every distinct request once, `concurrency` at a time (the reference run)."""
        sem = asyncio.Semaphore(self._concurrency)

        async def one(spec: RequestSpec) -> RequestRecord:
            async with sem:
                return await stream_one(
                    self._session, self._base_url, spec, self._model, self._timeout_s
                )

        return list(await asyncio.gather(*(one(s) for s in self._specs)))

    def start(self, ramp_s: float = 0.0) -> None:
        """Start a new window of load (the records of the previous one are dropped). The workers
        start one after another over `ramp_s`, so that their requests do not end in lockstep."""
        if self._workers:
            raise RuntimeError("the load is already running")
        self._stop.clear()
        self.records = []
        self._current = {}
        self._workers = [
            asyncio.create_task(
                self._worker(i, ramp_s * i / self._concurrency), name=f"drill-load-{i}"
            )
            for i in range(self._concurrency)
        ]

    async def _worker(self, i: int, delay_s: float) -> None:
        if delay_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay_s)
        while not self._stop.is_set():
            spec = self._specs[next(self._next)]
            self._current[i] = spec.index
            self.records.append(
                await stream_one(self._session, self._base_url, spec, self._model, self._timeout_s)
            )
            del self._current[i]

    async def stop(self, drain_timeout_s: float) -> list[RequestRecord]:
        """Send nothing new; let the requests in flight end (each has its own deadline). Requests
        still running after `drain_timeout_s` are cancelled and recorded as errors (lost)."""
        self._stop.set()
        workers, self._workers = self._workers, []
        if not workers:
            return self.records
        _, pending = await asyncio.wait(workers, timeout=drain_timeout_s)
        for t in pending:
            t.cancel()
        for t in workers:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        now = time.monotonic()
        for index in self._current.values():
            self.records.append(
                RequestRecord(
                    index=index, started=now, ended=now, error="still running at the drain"
                )
            )
        self._current = {}
        return self.records

    async def close(self) -> None:
        """Cancel any workers (an interrupted drill)."""
        await self.stop(0.0)
