"""A kept stream's events, held small (pure: no clock, no I/O).

The events of one stream are alike: an SSE chunk is its id line (`id: <stream>:<seq>`), then
the same ~150 bytes (`data: {"id":"chatcmpl-…","object":…,"model":…,"choices":[{"index":0,
"delta":{`), its few bytes of text, and the same ~45 bytes again (`},"logprobs":null,…}]}`).
From two consecutive events a stream learns a `Shape` (the id line, if both had theirs, and
the bytes they share at their start and their end); each later event that has a shape it
learned is kept as its own bytes only, and made whole again, byte for byte, when a reader asks
for it. An event of no shape it knows is kept whole, and with the one before it may teach it
another (a Responses stream: its first events are whole responses, its deltas come after).
Whatever the events are (gRPC messages, Responses events), nothing is lost: the worst case
keeps every event whole, with five bytes beside it (where it ends, its flag).
"""

from __future__ import annotations

from array import array
from typing import Final

# What two events must share (start and end together) for a stream to pack its events.
MIN_SHARED: Final = 32
# Shapes a stream may learn, and how many times it may try (each try compares two events).
MAX_SHAPES: Final = 3
LEARN_TRIES: Final = 8


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

    def whole_len(self, own: int, seq: int) -> int:
        """The length of event `seq` whole, from the length of what `pack` kept of it."""
        n = self._head_len + own + self._tail_len
        return n if self.id_prefix is None else n + self._id_len + len(b"%d\n" % seq)


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


class Events:
    """One stream's events as kept, oldest first, in one buffer: each event's kept bytes, where
    they end, and a flag (0: whole, k: packed by the k-th shape); about five bytes an event
    besides its own (a bytes object each took 40-50 more). `sent`: the bytes of its events whole
    (what a replay of them all gives)."""

    __slots__ = (
        "_data",
        "_ends",
        "_flags",
        "_hot",
        "_hot_k",
        "_ref",
        "_ref_seq",
        "_shapes",
        "_skip",
        "_tries",
        "id_prefix",
        "n",
        "sent",
    )

    def __init__(self, id_prefix: bytes) -> None:
        self.id_prefix = id_prefix  # each event's id line: this, its number and "\n"
        # Events [_skip, _skip + n) are kept: event i's bytes are _data[_ends[i-1]:_ends[i]]
        # (from 0 for the first). Those before _skip were dropped; they leave the buffer once
        # they outnumber or outweigh the rest (so it holds at most twice what is kept).
        self._data = bytearray()
        self._ends = array("I")
        self._flags = bytearray()
        self._skip = 0
        self._shapes: list[Shape] = []
        self._hot: Shape | None = None  # the shape the newest packed event had
        self._hot_k = 0
        self._ref: bytes | None = None  # the newest event, kept whole, while learning
        self._ref_seq = 0
        self._tries = LEARN_TRIES
        self.n = 0  # events kept
        self.sent = 0

    def __len__(self) -> int:
        return self.n

    def kept_bytes(self) -> int:
        return len(self._data) - self._start(self._skip)

    def _start(self, i: int) -> int:
        return self._ends[i - 1] if i else 0

    def _keep(self, own: bytes, k: int) -> int:
        data = self._data
        data += own
        self._ends.append(len(data))
        self._flags.append(k)
        return len(own)

    def add(self, data: bytes, seq: int) -> int:
        """Keep event `seq` (the next); returns the bytes it is kept in."""
        self.sent += len(data)
        self.n += 1
        hot = self._hot
        if hot is not None:
            own = hot.pack(data, seq)
            if own is not None:
                return self._keep(own, self._hot_k)
        return self._add(data, seq)

    def _add(self, data: bytes, seq: int) -> int:
        shapes = self._shapes
        for k, shape in enumerate(shapes, 1):
            if shape is not self._hot and (own := shape.pack(data, seq)) is not None:
                self._hot, self._hot_k = shape, k
                return self._keep(own, k)
        self._keep(data, 0)
        if self._tries and len(shapes) < MAX_SHAPES:
            ref = self._ref
            if ref is not None and self._ref_seq == seq - 1:
                self._tries -= 1
                learned = learn(ref, data, seq - 1, self.id_prefix)
                if learned is not None:
                    shapes.append(learned)
                    self._hot, self._hot_k = learned, len(shapes)
                    self._ref = None
                    return len(data)
            self._ref, self._ref_seq = (data, seq) if self._tries else (None, 0)
        return len(data)

    def given_shape(self, head: bytes, tail: bytes) -> int:
        """A shape the producer's events have (it knows how it made them: nothing to learn or
        check); its flag, for `add_own`. A stream given one learns no other (what else it
        sends is its few ends: kept whole)."""
        self._shapes.append(Shape(self.id_prefix, head, tail))
        self._tries = 0
        self._ref = None
        return len(self._shapes)

    def add_own(self, own: bytes, k: int, whole: int) -> int:
        """Keep the next event, given as its own bytes in shape `k` (`whole`: its length whole,
        id line included)."""
        data = self._data  # (`_keep`, inline: the direct writer's path, once a token)
        data += own
        self._ends.append(len(data))
        self._flags.append(k)
        self.n += 1
        self.sent += whole
        self._ref = None  # (the event before the next one is not kept whole)
        return len(own)

    def add_owns(self, owns: list[bytes], k: int, whole: int) -> int:
        """`add_own` for several events at once (`whole`: their length whole, together)."""
        data = self._data
        at = len(data)
        ends = self._ends
        for own in owns:
            at += len(own)
            ends.append(at)
        n = at - len(data)
        data += b"".join(owns)
        self._flags += bytes((k,)) * len(owns)
        self.n += len(owns)
        self.sent += whole
        self._ref = None
        return n

    def popleft(self, seq: int) -> int:
        """Drop the oldest event (numbered `seq`); returns the bytes it was kept in."""
        i = self._skip
        start = self._start(i)
        end = self._ends[i]
        k = self._flags[i]
        self._skip = i = i + 1
        self.n -= 1
        if self._ref_seq == seq:
            self._ref = None
        own = end - start
        self.sent -= own if k == 0 else self._shapes[k - 1].whole_len(own, seq)
        if i > self.n or end > len(self._data) - end:
            self._compact()
        return own

    def _compact(self) -> None:
        """The dropped events leave the buffer."""
        skip = self._skip
        cut = self._start(skip)
        del self._data[:cut]
        self._ends = array("I", [e - cut for e in self._ends[skip:]])
        del self._flags[:skip]
        self._skip = 0

    def clear(self) -> None:
        self._data = bytearray()
        self._ends = array("I")
        self._flags = bytearray()
        self._skip = 0
        self._ref = None
        self.n = self.sent = 0

    def tail(self, n: int, seq: int, count: int | None = None) -> list[bytes]:
        """`count` (default all) of the newest `n` events, oldest first (the first numbered
        `seq`), whole."""
        n = min(n, self.n)
        count = n if count is None else min(count, n)
        if count <= 0:
            return []
        first = self._skip + self.n - n
        last = first + count
        ends = self._ends
        base = self._start(first)
        with memoryview(self._data) as view:
            blob = bytes(view[base : ends[last - 1]])  # (one copy; each event sliced from it)
        flags = self._flags
        shapes = self._shapes
        out = []
        at = 0
        for i in range(first, last):
            end = ends[i] - base
            k = flags[i]
            own = blob[at:end]
            out.append(own if k == 0 else shapes[k - 1].unpack(own, seq))
            at = end
            seq += 1
        return out
