"""A detached producer (gateway.streams.producer.produce) over any Source: it runs to the
source's end, ends with its error, or stops once no reader was attached for the grace; it
releases the source and finishes the log whichever way it ends."""

from __future__ import annotations

import asyncio

from gateway.streams.policy import Limits
from gateway.streams.producer import Abandoned, produce
from gateway.streams.store import StreamLog, StreamStore
from gateway.types import GatewayError, GatewayTimeout


class Items:
    """A source of the given items, then (with `hang`) nothing more, ever."""

    def __init__(self, items: list[int], hang: bool = False, error: GatewayError | None = None):
        self.items = items
        self.hang = hang
        self.error = error
        self.handed = self.released = 0
        self.waiting = asyncio.Event()  # set once it hangs

    def handover(self) -> None:
        self.handed += 1

    async def take(self) -> int | None:
        await asyncio.sleep(0)
        if self.items:
            return self.items.pop(0)
        if self.error is not None:
            raise self.error
        if self.hang:
            self.waiting.set()
            await asyncio.Event().wait()
        return None

    async def release(self) -> None:
        self.released += 1


class Enc:
    def __init__(self, log: StreamLog) -> None:
        self.log = log
        self.pending: list[bytes] = []

    def add(self, item: int) -> None:
        self.pending.append(b"%d" % item)

    def end(self) -> None:
        self.pending.append(b"end")

    def error(self, e: GatewayError) -> None:
        self.pending.append(e.type.encode())

    def take(self) -> object:
        self.log.extend(self.pending)
        self.pending = []
        return None


def new_log() -> StreamLog:
    log = StreamStore(Limits(10, 1 << 20, 60.0), 100, 1 << 20).open("t", "sse")
    assert log is not None
    return log


async def test_it_runs_to_the_sources_end_and_releases_it() -> None:
    log, src = new_log(), Items([1, 2, 3])
    await asyncio.wait_for(produce(src, Enc(log), log, 60.0), 5.0)
    assert log.since(0) == [b"1", b"2", b"3", b"end"]
    assert log.finished and (src.handed, src.released) == (1, 1)


async def test_the_sources_error_ends_it() -> None:
    log, src = new_log(), Items([1], error=GatewayTimeout("late"))
    await asyncio.wait_for(produce(src, Enc(log), log, 60.0), 5.0)
    assert log.since(0) == [b"1", GatewayTimeout.type.encode()]
    assert log.finished and src.released == 1


async def test_nobody_reattached_within_the_grace_stops_it() -> None:
    log, src = new_log(), Items([1, 2], hang=True)
    await asyncio.wait_for(produce(src, Enc(log), log, 0.05), 5.0)
    assert log.since(0) == [b"1", b"2", Abandoned.type.encode()]
    assert log.finished and src.released == 1


async def test_cancelled_it_still_releases_the_source() -> None:
    log, src = new_log(), Items([], hang=True)
    task = asyncio.create_task(produce(src, Enc(log), log, 60.0))
    await asyncio.wait_for(src.waiting.wait(), 5.0)  # (it runs, waiting on its source)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=5.0)
    assert done and task.cancelled()
    assert log.finished and src.released == 1
