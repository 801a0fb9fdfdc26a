"""A stream whose client left, kept going for `detach_grace_s`: its events are kept for a
reader to reattach (GET /v1/streams/{id}, gRPC Resume); when none is attached for the grace,
the engine requests are aborted (the tokens generated are settled as for any client that
leaves). One request (a Job), or the choices of a Fanout (n > 1, a batch of prompts): each is
a Source of items that the API edge's Encoder turns into events.
"""

from __future__ import annotations

import asyncio
from typing import Protocol, TypeVar

from gateway.runtime.job import Job
from gateway.streams.store import StreamLog
from gateway.types import Delta, GatewayError

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
T_contra = TypeVar("T_contra", contravariant=True)


class Abandoned(GatewayError):
    status = 499
    type = "client_gone"


class Encoder(Protocol[T_contra]):
    """An API edge's events from a source's items (kept in its stream's log as they are made)."""

    def add(self, batch: T_contra) -> None: ...
    def end(self) -> None: ...
    def error(self, e: GatewayError) -> None: ...
    def take(self) -> object: ...


class Source(Protocol[T_co]):
    """What a detached stream's events come from."""

    def handover(self) -> None:
        """Its client side moves to the current task (timers cut this task from now on)."""

    async def take(self) -> T_co | None:
        """The next item (None: the end); raises the generation's error."""

    async def release(self) -> None:
        """Done with it: what still runs in an engine is aborted."""


class JobSource:
    """One request's deltas."""

    __slots__ = ("gen",)

    def __init__(self, gen: Job) -> None:
        self.gen = gen

    def handover(self) -> None:
        self.gen.handover()

    async def take(self) -> list[Delta] | None:
        return await self.gen.take() or None

    async def release(self) -> None:
        self.gen.close()


async def run_detached(gen: Job, enc: Encoder[list[Delta]], log: StreamLog, grace_s: float) -> None:
    """Produce the rest of `gen`'s events into `log` (the job's timer now cuts this task)."""
    await produce(JobSource(gen), enc, log, grace_s)


async def produce(src: Source[T], enc: Encoder[T], log: StreamLog, grace_s: float) -> None:
    """Produce the rest of `src`'s events into `log`, until its end, its error, or until no
    reader was attached for `grace_s`."""
    src.handover()
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
                    item = await src.take()
            except TimeoutError:
                continue  # (is it abandoned now?)
            except GatewayError as e:
                enc.error(e)
                enc.take()
                return
            if item is None:
                enc.end()
                enc.take()
                return
            enc.add(item)
            enc.take()
    finally:
        log.finish()
        await src.release()
