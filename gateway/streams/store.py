"""The stream store: each kept stream's events (opaque bytes, numbered from 1), bounded.

Bounds: per stream, its newest `max_stream_events` events within `max_stream_bytes` (older ones
are dropped: a reader can no longer start before them); per process, `max_streams` streams and
`max_bytes` bytes of events (an event past that evicts finished streams, then trims its own
stream; each event counts the bytes it is kept in plus EVENT_OVERHEAD: a stream's events are
kept packed, compact.py). A finished stream stays for `retention_s`. A stream the store cannot
keep is not opened (`open` returns None): the caller serves it without resume.

The producer appends on the token path (no await, no task): an append wakes the stream's
reader, if one waits. One reader at a time: attaching replaces the one before.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import time
from collections.abc import Callable
from typing import Protocol

from gateway.streams.compact import Events
from gateway.streams.owner import STREAM
from gateway.streams.policy import Held, Limits, Plan, Totals, plan

# A reader replays at most this many events at a time (each made whole again), letting the
# loop run between batches.
REPLAY_BATCH = 1024
# What an event counts beyond the bytes it is kept in: what it cost when each event was an
# object of its own, kept so that the bounds keep the same events. Its end and flag now take 5
# bytes in its stream's buffers (compact.py); the events a stream drops leave them in bulk, so a
# stream trimmed at its bounds may hold up to twice the bytes it counts, briefly.
EVENT_OVERHEAD = 48


class Reader(Protocol):
    def replaced(self) -> None:
        """Another reader took the stream: this one stops."""


class StoreCounters(Protocol):
    def evicted(self, reason: str) -> None: ...
    def refused(self) -> None: ...


class StreamLog:
    __slots__ = (
        "_max_bytes",
        "_max_events",
        "_store",
        "_wake",
        "_when_finished",
        "events",
        "finished_at",
        "first",
        "kind",
        "left_at",
        "nbytes",
        "reader",
        "sid",
        "tenant",
    )

    def __init__(self, store: StreamStore, sid: str, tenant: str, kind: str, now: float) -> None:
        self._store = store
        self.sid = sid
        self.tenant = tenant
        self.kind = kind  # what its events are ("sse", "grpc"): a reader of another kind
        # does not find it
        self.events = Events(b"id: " + sid.encode() + b":")  # (kept packed: compact.py)
        self.first = 1  # the sequence number of events[0]
        self.nbytes = 0
        self.finished_at = math.inf
        self.reader: Reader | None = None
        self.left_at = now  # when the last reader left (the producer's client, at first)
        self._wake: asyncio.Future[None] | None = None
        self._max_bytes = store.max_stream_bytes
        self._max_events = store.max_stream_events
        self._when_finished = 0  # its bytes when it finished, counted in the store's

    @property
    def clock(self) -> Callable[[], float]:
        return self._store.clock

    @property
    def next_seq(self) -> int:
        return self.first + self.events.n

    @property
    def finished(self) -> bool:
        return self.finished_at != math.inf

    @property
    def whole_bytes(self) -> int:
        """Its events' bytes as sent, each with EVENT_OVERHEAD: what its own bounds count (a
        replay of them all is never larger than `max_stream_bytes`)."""
        events = self.events
        return events.sent + EVENT_OVERHEAD * events.n

    def append(self, data: bytes) -> None:
        """Keep one event (numbered `next_seq`)."""
        events = self.events
        self._kept(events.add(data, self.first + events.n) + EVENT_OVERHEAD)

    def extend(self, frames: list[bytes]) -> None:
        """Keep several events at once (numbered from `next_seq` on)."""
        seq = self.first + self.events.n
        add = self.events.add
        n = sum([add(f, seq + i) for i, f in enumerate(frames)])
        self._kept(n + EVENT_OVERHEAD * len(frames))

    def given_shape(self, head: bytes, tail: bytes) -> int:
        """A shape of the producer's own events, `id: <sid>:<seq>\n` + head + own + tail: its
        flag for `extend_own` (compact.py)."""
        return self.events.given_shape(head, tail)

    def append_own(self, own: bytes, k: int, whole: int) -> None:
        """Keep one event of shape `k` (numbered `next_seq`), given as its own bytes and its
        length whole."""
        self._kept(self.events.add_own(own, k, whole) + EVENT_OVERHEAD)

    def extend_own(self, owns: list[bytes], whole: int, k: int) -> None:
        """Keep several events of shape `k` (numbered from `next_seq` on), each given as its
        own bytes (`whole`: their length whole, together): kept as they would be packed, with
        nothing to check."""
        self._kept(self.events.add_owns(owns, k, whole) + EVENT_OVERHEAD * len(owns))

    def _kept(self, n: int) -> None:
        """`n` more bytes kept: counted, the bounds applied, the reader woken."""
        self.nbytes += n
        store = self._store
        store.nbytes += n
        if (
            self.whole_bytes > self._max_bytes
            or self.events.n > self._max_events
            or store.nbytes > store.max_bytes
        ):
            store.trim(self)
        if self._wake is not None:
            self._wake_up()

    def _wake_up(self) -> None:
        w = self._wake
        self._wake = None
        if w is not None and not w.done():
            w.set_result(None)

    def drop_oldest(self) -> None:
        n = self.events.popleft(self.first) + EVENT_OVERHEAD
        self.first += 1
        self.nbytes -= n
        self._store.nbytes -= n

    def since(self, after: int, limit: int | None = None) -> list[bytes] | None:
        """The events after sequence number `after` (the first `limit` of them, when given: a
        reader replays a long stream in batches); None when some of them were dropped."""
        if after + 1 < self.first:
            return None
        n = self.events.n - (after + 1 - self.first)
        if n <= 0:
            return []
        return self.events.tail(n, after + 1, limit)

    def last(self) -> bytes | None:
        """The newest event kept, whole (None: none is)."""
        return self.events.tail(1, self.next_seq - 1)[0] if len(self.events) else None

    def changed(self) -> asyncio.Future[None]:
        """Resolves at the next append, at the end of the stream, or when its reader changes."""
        w = self._wake
        if w is None or w.done():
            w = self._wake = asyncio.get_running_loop().create_future()
        return w

    def attach(self, reader: Reader) -> None:
        old, self.reader = self.reader, reader
        if old is not None and old is not reader:
            old.replaced()
        self._wake_up()

    def detach(self, reader: Reader) -> None:
        if self.reader is reader:
            self.reader = None
            self.left_at = self._store.clock()

    def abandoned(self, grace_s: float, now: float) -> bool:
        """Nobody read it for `grace_s`: its producer may stop."""
        return self.reader is None and now - self.left_at >= grace_s

    def discard(self) -> None:
        """A stream whose id was never told: gone from the store at once (not kept finished)."""
        if not self.finished and self._store.logs.get(self.sid) is self:
            self._store._evict((self.sid,), counted=False)

    def finish(self) -> None:
        """The producer is done: the events are kept for `retention_s` from now."""
        if not self.finished and self._store.logs.get(self.sid) is self:
            store = self._store
            self.finished_at = store.clock()
            store.finished[self.sid] = self.finished_at
            self._when_finished = self.nbytes
            store.finished_nbytes += self.nbytes
            self._wake_up()


class StreamStore:
    def __init__(
        self,
        limits: Limits,
        max_stream_events: int,
        max_stream_bytes: int,
        counters: StoreCounters | None = None,
        clock: Callable[[], float] = time.monotonic,
        tag: str = "",
    ) -> None:
        """`tag`: the worker's, in every stream id (gateway/streams/owner.py)."""
        self.limits = limits
        self.prefix = STREAM + tag
        self.max_stream_events = max_stream_events
        self.max_stream_bytes = max_stream_bytes
        self.max_bytes = limits.max_bytes
        self.counters = counters
        self.clock = clock
        self.logs: dict[str, StreamLog] = {}
        # The finished ones, in the order they finished: the first is the first to expire.
        self.finished: dict[str, float] = {}
        self.nbytes = 0
        self.finished_nbytes = 0

    def _plan(self, now: float, streams: int) -> Plan:
        logs = self.logs
        finished = (Held(sid, logs[sid].nbytes, at) for sid, at in self.finished.items())
        held = Totals(len(logs), self.nbytes, len(self.finished), self.finished_nbytes)
        return plan(finished, held, self.limits, now, streams, 0)

    def _evict(self, sids: tuple[str, ...], counted: bool = True) -> None:
        now = self.clock()
        for sid in sids:
            log = self.logs.pop(sid)
            if self.finished.pop(sid, None) is not None:
                self.finished_nbytes -= log._when_finished
            self.nbytes -= log.nbytes
            if counted and self.counters is not None:
                expired = log.finished_at + self.limits.retention_s <= now
                self.counters.evicted("expired" if expired else "room")
            log.first += len(log.events)  # a reader still on it learns its events are gone
            log.events.clear()
            log.nbytes = 0
            log._wake_up()

    def open(self, tenant: str, kind: str) -> StreamLog | None:
        """A new stream's log, or None when the store is full (served without resume)."""
        now = self.clock()
        lim = self.limits
        if len(self.logs) >= lim.max_streams or self.nbytes > lim.max_bytes or self._due(now):
            p = self._plan(now, 1)  # (else there is nothing to decide)
            self._evict(p.evict)
            fits = p.fits
        else:
            fits = True
        if not fits:
            if self.counters is not None:
                self.counters.refused()
            return None
        sid = self.prefix + secrets.token_urlsafe(12)
        log = self.logs[sid] = StreamLog(self, sid, tenant, kind, now)
        return log

    def get(self, sid: str, tenant: str, kind: str) -> StreamLog | None:
        """The tenant's stream `sid` of `kind`, if it is kept (another tenant's is not found)."""
        self.sweep()
        log = self.logs.get(sid)
        if log is None or log.tenant != tenant or log.kind != kind:
            return None
        return log

    def _due(self, now: float) -> bool:
        """A finished stream is past its retention."""
        first = next(iter(self.finished.values()), None)
        return first is not None and first + self.limits.retention_s <= now

    def sweep(self) -> None:
        """Evict the finished streams past their retention."""
        now = self.clock()
        if self._due(now):
            self._evict(self._plan(now, 0).evict)

    def trim(self, log: StreamLog) -> None:
        """`log` is over a bound: drop its oldest events, or evict finished streams for the
        process's bytes (then drop its own oldest if that was not enough)."""
        while log.events and (
            log.whole_bytes > self.max_stream_bytes or len(log.events) > self.max_stream_events
        ):
            log.drop_oldest()
        if self.nbytes <= self.limits.max_bytes:
            return
        p = self._plan(self.clock(), 0)
        self._evict(tuple(s for s in p.evict if s != log.sid))
        while log.events and self.nbytes > self.limits.max_bytes:
            log.drop_oldest()
