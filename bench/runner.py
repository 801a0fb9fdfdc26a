"""Drives the load: closed loop (C streams back to back) or open loop (Poisson arrivals).

A target is an async callable that sends one request and returns its `Result`; it never raises
for a failed request (failures are error kinds), and it puts a deadline on every network await.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

from bench import result as kinds
from bench.plan import RequestSpec
from bench.result import Result

Target = Callable[[RequestSpec], Awaitable[Result]]


class Tally:
    """Live counts for the progress bar."""

    __slots__ = ("done", "failed", "tokens", "total")

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.failed = 0
        self.tokens = 0

    def add(self, r: Result) -> None:
        self.done += 1
        self.tokens += r.tokens
        if r.errors:
            self.failed += 1


async def run_phase(
    target: Target,
    specs: Sequence[RequestSpec],
    *,
    mode: str,
    concurrency: int,
    duration_s: float,
    tally: Tally | None = None,
) -> list[Result]:
    """Sends `specs` (stopping early once `duration_s` has passed) and returns their results."""
    results: list[Result] = []
    stop_at = time.monotonic() + duration_s

    def record(r: Result) -> None:
        results.append(r)
        if tally is not None:
            tally.add(r)

    if mode == "closed":
        queue = iter(specs)

        async def stream() -> None:
            for spec in queue:
                if time.monotonic() >= stop_at:
                    return
                record(await target(spec))

        async with asyncio.TaskGroup() as tg:
            for _ in range(min(concurrency, len(specs))):
                tg.create_task(stream())
        return results

    in_flight = 0

    async def one(spec: RequestSpec) -> None:
        nonlocal in_flight
        try:
            record(await target(spec))
        finally:
            in_flight -= 1

    t0 = time.monotonic()
    async with asyncio.TaskGroup() as tg:
        for spec in specs:
            delay = t0 + spec.arrival_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            now = time.perf_counter()
            if time.monotonic() >= stop_at:
                break
            if in_flight >= concurrency:
                record(Result.failed(spec.index, spec.cls, now, now, kinds.CLIENT_SATURATED))
                continue
            in_flight += 1
            tg.create_task(one(spec))
    return results
