"""The Responses API's store of responses: each by id, with its tenant, for as long as it is
retained. A background response's events are not kept here but in the gateway's stream store
(gateway/streams/), as every API's streams are, under its bounds, retention and eviction; an
entry holds the log of its events there.

Small, bounded and in this process. Bounds: at most `max_responses` entries and `max_bytes`,
where a running response counts as its reserve (the most it will hold) and a finished one as
what it holds. Finished entries are evicted first, oldest first, and expire `retention_s` after
they finished; running ones are never evicted.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from gateway.config.schema import ResponsesSettings
from gateway.streams.store import StreamLog

__all__ = ["ResponseStore", "Stored"]

T = TypeVar("T")


class Stored(Generic[T]):
    """One entry: the response (`value`), whose it is, and its events when it has some."""

    __slots__ = ("finished_at", "id", "log", "reserve", "size", "tenant", "value")

    def __init__(
        self, id: str, tenant: str, value: T, log: StreamLog | None, reserve: int = 0
    ) -> None:
        self.id = id
        self.tenant = tenant
        self.value = value
        self.log = log  # its events, in the stream store (counted there)
        # What it counts while running: the most it will hold.
        self.reserve = reserve
        self.size = 0  # the bytes it holds, once finished
        self.finished_at: float | None = None

    @property
    def weight(self) -> int:
        """What it counts against the store's bytes."""
        return self.reserve if self.finished_at is None else self.size


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
        """`entry` ended, holding `size` bytes: retained from now."""
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
