"""The Responses API's store: responses by id, each with its tenant, for as long as they are
retained, and for a background one the log of its streaming events.

Small, bounded and in this process. Its interface is the narrow one a stream store offers
(append event bytes under a sequence number, read after N, follow live, retention, bounds): it
is to move onto the gateway's shared stream store, keeping only the responses by id here.

Bounds: at most `max_responses` entries and `max_bytes`, where a running background response
counts as `max_event_bytes` (the most its log may hold; past it the log drops its earliest
events) and a finished one as what it holds. Finished entries are evicted first, oldest first,
and expire `retention_s` after they finished; running ones are never evicted.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Generic, TypeVar

from gateway.config.schema import ResponsesSettings
from gateway.types import InvalidRequest

__all__ = ["EventLog", "ResponseStore", "Stored"]

T = TypeVar("T")


class EventLog:
    """One stream's events, numbered 0, 1, ...; its earliest are dropped past `max_bytes`."""

    __slots__ = ("_changed", "_events", "_first", "bytes", "closed", "max_bytes")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.closed = False
        self._events: deque[bytes] = deque()
        self._first = 0  # the sequence number of _events[0]
        self._changed: asyncio.Future[None] | None = None

    @property
    def next_seq(self) -> int:
        return self._first + len(self._events)

    def append(self, seq: int, data: bytes) -> None:
        """Keep `data` as event `seq` (the next one: events are numbered without gaps)."""
        if seq != self.next_seq or self.closed:
            raise ValueError(f"event {seq} out of order (next: {self.next_seq})")
        self._events.append(data)
        self.bytes += len(data)
        while self.bytes > self.max_bytes and len(self._events) > 1:
            self.bytes -= len(self._events.popleft())
            self._first += 1
        self._wake()

    def close(self) -> None:
        """No more events: followers end once they have read them all."""
        self.closed = True
        self._wake()

    def after(self, seq: int) -> list[bytes]:
        """The events numbered above `seq` (-1: all); InvalidRequest when some are gone."""
        if seq + 1 < self._first:
            raise InvalidRequest(
                f"Invalid value for 'starting_after': events up to {self._first - 1} are no "
                "longer kept.",
                "starting_after",
            )
        start = max(seq + 1 - self._first, 0)
        return [self._events[i] for i in range(start, len(self._events))]

    async def wait(self, seq: int, timeout_s: float) -> None:
        """Until an event above `seq` is kept or the log closes, for at most `timeout_s`."""
        if self.closed or self.next_seq > seq + 1:
            return
        if self._changed is None:
            self._changed = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(asyncio.shield(self._changed), timeout_s)
        except TimeoutError:
            return

    def _wake(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None and not changed.done():
            changed.set_result(None)


class Stored(Generic[T]):
    """One entry: the response (`value`), whose it is, and its events when it has some."""

    __slots__ = ("finished_at", "id", "log", "reserve", "size", "tenant", "value")

    def __init__(
        self, id: str, tenant: str, value: T, log: EventLog | None, reserve: int = 0
    ) -> None:
        self.id = id
        self.tenant = tenant
        self.value = value
        self.log = log
        # What it counts while running besides its log's bound: the most it will hold.
        self.reserve = reserve
        self.size = 0  # the bytes it holds besides its log, once finished
        self.finished_at: float | None = None

    @property
    def weight(self) -> int:
        """What it counts against the store's bytes."""
        if self.finished_at is None:
            return self.reserve + (self.log.max_bytes if self.log is not None else 0)
        return self.size + (self.log.bytes if self.log is not None else 0)


class ResponseStore(Generic[T]):
    def __init__(
        self, settings: ResponsesSettings, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._entries: dict[str, Stored[T]] = {}
        self._finished: OrderedDict[str, float] = OrderedDict()  # id -> when, in that order
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, entry: Stored[T]) -> bool:
        """Keep a running entry; False: the store is full of running ones."""
        self._expire()
        weight = entry.weight
        s = self.settings
        while self._finished and (
            len(self._entries) >= s.max_responses or self.bytes + weight > s.max_bytes
        ):
            self._drop(next(iter(self._finished)))
        if len(self._entries) >= s.max_responses or self.bytes + weight > s.max_bytes:
            return False
        self._entries[entry.id] = entry
        self.bytes += weight
        return True

    def finish(self, entry: Stored[T], size: int) -> None:
        """`entry` ended, holding `size` bytes (besides its log): retained from now."""
        if self._entries.get(entry.id) is not entry or entry.finished_at is not None:
            return
        self.bytes -= entry.weight
        entry.size = size
        entry.finished_at = self._clock()
        self.bytes += entry.weight
        self._finished[entry.id] = entry.finished_at
        while self._finished and self.bytes > self.settings.max_bytes:
            self._drop(next(iter(self._finished)))

    def get(self, id: str, tenant: str) -> Stored[T] | None:
        """The entry `id` of `tenant` (None: none, another tenant's, or expired)."""
        self._expire()
        entry = self._entries.get(id)
        if entry is None or entry.tenant != tenant:
            return None
        return entry

    def running(self) -> list[Stored[T]]:
        return [e for e in self._entries.values() if e.finished_at is None]

    def _expire(self) -> None:
        horizon = self._clock() - self.settings.retention_s
        while self._finished:
            id, at = next(iter(self._finished.items()))
            if at > horizon:
                return
            self._drop(id)

    def _drop(self, id: str) -> None:
        self._finished.pop(id, None)
        entry = self._entries.pop(id)
        self.bytes -= entry.weight
