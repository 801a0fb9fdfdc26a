"""Every request's deadline on one loop timer.

A job's deadline (its first-output limit, then its end) was a loop timer of its own: with uvloop
a timer handle, a libuv timer, a context and a bound method, ~600 bytes held for the whole life
of every stream, and a libuv timer started and stopped per request. Here a deadline is an entry
in the bucket of its tick (`TICK_S` wide): one loop timer, set for the earliest tick that has a
bucket, expires the entries of every tick that has come. An entry expires at its time or up to
`TICK_S` after it, never before (by the loop's clock, to 10 ns); removing one is a dict
deletion. An entry added while a tick
is being expired, for that tick or an earlier one, goes to the next tick: an owner that adds
again for a time already past expires once a tick at most, never in a loop.

The scheduler owns one per gateway (its jobs' `arm` adds to it); it uses the loop it is first
used in.
"""

from __future__ import annotations

import asyncio
import heapq
import math
from collections.abc import Callable
from typing import Any, Protocol

TICK_S = 0.01
# uvloop's clock counts whole milliseconds: a tick's time, `tick * TICK_S`, can come out a
# rounding step above the time its timer fires at; a tick is due when the clock is within this
# fraction of a tick of it (10 ns).
_DUE_SLACK = 1e-6
# Ticks of emptied buckets the heap may hold beyond twice the buckets, before it is rebuilt.
_SLACK_TICKS = 1024


class Expiring(Protocol):
    def expire(self) -> None:
        """Its deadline has come (once per `add` not removed)."""


class Timers(Protocol):
    """What the wheel needs of its loop."""

    def time(self) -> float: ...

    def call_at(self, when: float, callback: Callable[[], object], /) -> Cancellable: ...

    def call_exception_handler(self, context: dict[str, Any], /) -> None: ...


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Deadlines:
    __slots__ = ("_armed", "_buckets", "_floor", "_handle", "_loop", "_ticks")

    def __init__(self, loop: Timers | None = None) -> None:
        """`loop`: the running loop at the first `add` unless given."""
        self._loop = loop
        self._buckets: dict[int, dict[Expiring, None]] = {}
        self._ticks: list[int] = []  # the buckets' ticks, a heap (emptied ones' may stay)
        self._handle: Cancellable | None = None
        self._armed = math.inf  # the tick the loop timer is set for
        self._floor = 0  # the first tick not yet expired: no entry goes to an earlier one

    def __len__(self) -> int:
        return sum(map(len, self._buckets.values()))

    def add(self, owner: Expiring, when: float) -> int:
        """`owner.expire()` once `when` (loop time, finite) has come; returns the entry's tick
        (for `remove`). An owner has at most one entry per tick."""
        tick = math.ceil(when / TICK_S)
        if tick * TICK_S < when:  # (the float product is when its tick fires: never before)
            tick += 1
        if tick < self._floor:
            tick = self._floor  # (its time has passed: the next tick to expire)
        buckets = self._buckets
        bucket = buckets.get(tick)
        if bucket is None:
            bucket = buckets[tick] = {}
            ticks = self._ticks
            heapq.heappush(ticks, tick)
            if len(ticks) > 2 * len(buckets) + _SLACK_TICKS:
                # Emptied buckets' ticks stay until they come (a deadline is minutes away and
                # most requests end in seconds): the heap is rebuilt from the buckets once they
                # outnumber them, so it holds at most about twice as many.
                self._ticks = ticks = list(buckets)
                heapq.heapify(ticks)
            if tick < self._armed:
                self._arm(tick)
        bucket[owner] = None
        return tick

    def remove(self, owner: Expiring, tick: int) -> None:
        """The entry `add` returned `tick` for will not expire (nothing if it did)."""
        bucket = self._buckets.get(tick)
        if bucket is not None:
            bucket.pop(owner, None)
            if not bucket:
                del self._buckets[tick]  # (its tick leaves the heap when it comes)

    def _arm(self, tick: int) -> None:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        if self._handle is not None:
            self._handle.cancel()
        self._armed = tick
        self._handle = loop.call_at(tick * TICK_S, self._fire)

    def _fire(self) -> None:
        loop = self._loop
        assert loop is not None
        self._handle = None
        self._armed = math.inf
        now_tick = math.floor(loop.time() / TICK_S + _DUE_SLACK)
        ticks, buckets = self._ticks, self._buckets
        due: list[int] = []
        while ticks and ticks[0] <= now_tick:
            tick = heapq.heappop(ticks)
            if tick in buckets:
                due.append(tick)
        self._floor = max(self._floor, now_tick + 1)
        while ticks and ticks[0] not in buckets:
            heapq.heappop(ticks)  # emptied before their time
        if ticks:
            self._arm(ticks[0])
        # Each bucket stays reachable while it is emptied: an owner removed meanwhile (by
        # another's expiry) does not expire; one that adds again lands in a later tick (the
        # floor).
        for tick in due:
            bucket = buckets.get(tick)
            while bucket:
                owner = next(iter(bucket))
                del bucket[owner]
                try:
                    owner.expire()
                except Exception as e:  # one owner's bug is not the others' deadline
                    loop.call_exception_handler(
                        {"message": "a deadline's expiry failed", "exception": e}
                    )
            buckets.pop(tick, None)
