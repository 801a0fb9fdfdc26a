"""Which kept streams to evict, and whether a new stream may be kept (pure: no clock, no I/O).

Finished streams past their retention always go. When the store must make room (for a new
stream, or for an event past the process's byte bound), finished streams go first, those that
finished earliest first; a live stream is never evicted here (its own bounds trim its oldest
events instead). A new stream is kept only when it fits once that room is made; otherwise it is
served without resume, and no unexpired stream is evicted for nothing.
"""

from __future__ import annotations

import math
from typing import NamedTuple


class Limits(NamedTuple):
    max_streams: int
    max_bytes: int
    retention_s: float


class Held(NamedTuple):
    sid: str
    nbytes: int
    finished_at: float = math.inf  # inf: still live


class Plan(NamedTuple):
    evict: tuple[str, ...]
    fits: bool


def plan(held: list[Held], limits: Limits, now: float, streams: int, nbytes: int) -> Plan:
    """Make room for `streams` more streams and `nbytes` more bytes among `held`."""
    expired = [h for h in held if h.finished_at + limits.retention_s <= now]
    gone = {h.sid for h in expired}
    count = len(held) - len(expired) + streams
    total = sum(h.nbytes for h in held) - sum(h.nbytes for h in expired) + nbytes
    finished = sorted(
        (h for h in held if h.sid not in gone and h.finished_at != math.inf),
        key=lambda h: (h.finished_at, h.sid),
    )
    extra: list[str] = []
    for h in finished:
        if count <= limits.max_streams and total <= limits.max_bytes:
            break
        extra.append(h.sid)
        count -= 1
        total -= h.nbytes
    fits = count <= limits.max_streams and total <= limits.max_bytes
    if not fits:
        extra = []  # making room would not help: keep them for their clients
    return Plan(tuple(h.sid for h in expired) + tuple(extra), fits)
