"""A kept stream's events, held small (pure: no clock, no I/O).

The events of one stream are alike: an SSE chunk is its id line (`id: <stream>:<seq>`), then
the same ~150 bytes (`data: {"id":"chatcmpl-…","object":…,"model":…,"choices":[{"index":0,
"delta":{`), its few bytes of text, and the same ~45 bytes again (`},"logprobs":null,…}]}`).
From two consecutive events a stream learns its `Shape` (the id line, if both had theirs, and
the bytes they share at their start and their end); each later event that has that shape is
kept as its own bytes only, and made whole again, byte for byte, when a reader asks for it.
An event of another shape is kept whole. Whatever the events are (gRPC messages, Responses
events), nothing is lost: the worst case keeps every event whole.
"""

from __future__ import annotations

from typing import Final

# What two events must share (start and end together) for a stream to pack its events.
MIN_SHARED: Final = 32


def shared_head(a: bytes, b: bytes) -> int:
    """How many leading bytes `a` and `b` have in common."""
    n = min(len(a), len(b))
    x = int.from_bytes(a[:n], "big") ^ int.from_bytes(b[:n], "big")
    return n - (x.bit_length() + 7) // 8


def shared_tail(a: bytes, b: bytes, limit: int) -> int:
    """How many trailing bytes `a` and `b` have in common, at most `limit`."""
    n = min(len(a), len(b), limit)
    if n <= 0:
        return 0
    x = int.from_bytes(a[len(a) - n :], "little") ^ int.from_bytes(b[len(b) - n :], "little")
    return n - (x.bit_length() + 7) // 8


class Shape:
    """What every packed event of a stream has around its own bytes."""

    __slots__ = ("_head_len", "_id_len", "_tail_len", "head", "id_prefix", "tail")

    def __init__(self, id_prefix: bytes | None, head: bytes, tail: bytes) -> None:
        self.id_prefix = id_prefix  # each event's id line is this, its number and "\n"
        self.head = head
        self.tail = tail
        self._id_len = len(id_prefix) if id_prefix is not None else 0
        self._head_len = len(head)
        self._tail_len = len(tail)

    def pack(self, data: bytes, seq: int) -> bytes | None:
        """Event `seq` as kept (its own bytes), or None: it has another shape (keep it whole)."""
        start = 0
        idp = self.id_prefix
        if idp is not None:
            number = b"%d\n" % seq
            if not data.startswith(idp) or not data.startswith(number, self._id_len):
                return None
            start = self._id_len + len(number)
        end = len(data) - self._tail_len
        if end - start < self._head_len or not data.startswith(self.head, start):
            return None
        if self._tail_len and not data.endswith(self.tail):
            return None
        return data[start + self._head_len : end]

    def unpack(self, own: bytes, seq: int) -> bytes:
        """Event `seq` whole again, from what `pack` kept of it."""
        if self.id_prefix is None:
            return b"".join((self.head, own, self.tail))
        return b"%s%d\n%s%s%s" % (self.id_prefix, seq, self.head, own, self.tail)


def learn(a: bytes, b: bytes, seq: int, id_prefix: bytes) -> Shape | None:
    """The shape of events `seq` (`a`) and `seq + 1` (`b`), or None: they share too little."""
    line_a, line_b = b"%s%d\n" % (id_prefix, seq), b"%s%d\n" % (id_prefix, seq + 1)
    idp: bytes | None = None
    if id_prefix and a.startswith(line_a) and b.startswith(line_b):
        a, b, idp = a[len(line_a) :], b[len(line_b) :], id_prefix
    head = shared_head(a, b)
    tail = shared_tail(a, b, min(len(a), len(b)) - head)
    if head + tail < MIN_SHARED:
        return None
    return Shape(idp, a[:head], a[len(a) - tail :])
