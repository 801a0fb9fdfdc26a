"""A stream whose client left, kept going for `detach_grace_s`: its events are kept for a
reader to reattach (GET /v1/streams/{id}, gRPC Resume); when none is attached for the grace,
the engine request is aborted (the tokens generated are settled as for any client that leaves).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from gateway.runtime.job import Job
from gateway.streams.store import StreamLog
from gateway.types import Delta, GatewayError


class Abandoned(GatewayError):
    status = 499
    type = "client_gone"


class Encoder(Protocol):
    """An API edge's events from a job's deltas (kept in its stream's log as they are made)."""

    def add(self, batch: list[Delta]) -> None: ...
    def end(self) -> None: ...
    def error(self, e: GatewayError) -> None: ...
    def take(self) -> object: ...


async def run_detached(gen: Job, enc: Encoder, log: StreamLog, grace_s: float) -> None:
    """Produce the rest of `gen`'s events into `log` (the job's timer now cuts this task)."""
    gen.handover()
    clock = log.clock
    try:
        while True:
            now = clock()
            if log.abandoned(grace_s, now):
                enc.error(Abandoned(f"No reader reattached within {grace_s:g} s."))
                enc.take()
                return
            wait = grace_s if log.reader is not None else log.left_at + grace_s - now
            try:
                async with asyncio.timeout(wait):
                    batch = await gen.take()
            except TimeoutError:
                continue  # (is it abandoned now?)
            except GatewayError as e:
                enc.error(e)
                enc.take()
                return
            if not batch:
                enc.end()
                enc.take()
                return
            enc.add(batch)
            enc.take()
    finally:
        log.finish()
        gen.close()
