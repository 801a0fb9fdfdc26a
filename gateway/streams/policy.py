"""Which kept streams to evict, and whether a new stream may be kept (pure: no clock, no I/O).

Finished streams past their retention always go. When the store must make room (for a new
stream, or for an event past the process's byte bound), finished streams go first, those that
finished earliest first; a live stream is never evicted here (its own bounds trim its oldest
events instead). A new stream is kept only when it fits once that room is made; otherwise it is
served without resume, and no unexpired stream is evicted for nothing.

The plan reads the finished streams in the order they finished and stops at the first it keeps:
its cost is the streams it evicts, not the streams held (a full store plans at every open).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple


class Limits(NamedTuple):
    max_streams: int
    max_bytes: int
    retention_s: float


class Held(NamedTuple):
    sid: str
    nbytes: int
    finished_at: float = math.inf  # inf: still live


class Totals(NamedTuple):
    """What the store holds: every stream, and the finished ones among them."""

    streams: int
    nbytes: int
    finished_streams: int
    finished_nbytes: int


class Plan(NamedTuple):
    evict: tuple[str, ...]
    fits: bool


def plan(
    finished: Iterable[Held], held: Totals, limits: Limits, now: float, streams: int, nbytes: int
) -> Plan:
    """Make room for `streams` more streams and `nbytes` more bytes; `finished`: the finished
    streams held, in the order they finished (read only as far as needed)."""
    count = held.streams + streams
    total = held.nbytes + nbytes
    # Evicting every finished stream would make it fit: else none is evicted for room.
    can_fit = (
        count - held.finished_streams <= limits.max_streams
        and total - held.finished_nbytes <= limits.max_bytes
    )
    evict: list[str] = []
    for h in finished:
        expired = h.finished_at + limits.retention_s <= now
        over = count > limits.max_streams or total > limits.max_bytes
        if not (expired or (over and can_fit)):
            break
        evict.append(h.sid)
        count -= 1
        total -= h.nbytes
    return Plan(tuple(evict), count <= limits.max_streams and total <= limits.max_bytes)
