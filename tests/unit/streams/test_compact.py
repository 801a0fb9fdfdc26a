"""Packing a kept stream's events: what two events share is found exactly, every packed event
is made whole again byte for byte, and an event of another shape is kept whole."""

from __future__ import annotations

import random
import tracemalloc

import pytest

from bench import store_events
from gateway.streams.compact import MIN_SHARED, Shape, learn, shared_head, shared_tail
from gateway.streams.policy import Limits
from gateway.streams.store import EVENT_OVERHEAD, StreamStore
from tests.unit.policy._util import FakeClock


def naive_head(a: bytes, b: bytes) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def naive_tail(a: bytes, b: bytes, limit: int) -> int:
    n = 0
    while n < min(len(a), len(b), max(limit, 0)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


@pytest.mark.parametrize(
    ("a", "b", "head", "tail"),
    [
        (b"", b"", 0, 0),
        (b"abc", b"abc", 3, 3),
        (b"abc", b"abd", 2, 0),
        (b"xbc", b"ybc", 0, 2),
        (b"\x00\x00a", b"\x00\x00b", 2, 0),  # zero bytes count as bytes
        (b"a\x00\x00", b"b\x00\x00", 0, 2),
        (b"ab", b"abcd", 2, 0),
        (b"cd", b"abcd", 0, 2),
    ],
)
def test_shared_head_and_tail(a: bytes, b: bytes, head: int, tail: int) -> None:
    assert shared_head(a, b) == head
    assert shared_tail(a, b, 99) == tail


def test_shared_head_and_tail_agree_with_a_byte_by_byte_walk() -> None:
    rng = random.Random(3)
    for _ in range(3000):
        common = bytes(rng.choice(b"ab\x00\xff") for _ in range(rng.randrange(6)))
        a = common + bytes(rng.choice(b"ab\x00") for _ in range(rng.randrange(6))) + common
        b = common + bytes(rng.choice(b"ab\x00") for _ in range(rng.randrange(6))) + common
        limit = rng.randrange(-1, 12)
        assert shared_head(a, b) == naive_head(a, b), (a, b)
        assert shared_tail(a, b, limit) == naive_tail(a, b, limit), (a, b, limit)


SID = b"st_abc"
IDP = b"id: " + SID + b":"


def chunk(seq: int, text: str, rid: str = "chatcmpl-1") -> bytes:
    head = f'{{"id":"{rid}","object":"chat.completion.chunk","created":1,"model":"m",'
    delta = f'"choices":[{{"index":0,"delta":{{"content":"{text}"}},'
    tail = '"logprobs":null,"finish_reason":null}]}'
    return IDP + b"%d\ndata: " % seq + (head + delta + tail).encode() + b"\n\n"


def test_two_chunks_teach_the_shape_and_later_ones_pack_to_their_text() -> None:
    shape = learn(chunk(1, "a"), chunk(2, "bb"), 1, IDP)
    assert shape is not None and shape.id_prefix == IDP
    assert shape.head.startswith(b"data: {") and shape.tail.endswith(b"}]}\n\n")
    own = shape.pack(chunk(7, "hello"), 7)
    assert own is not None and len(own) < 10 and b"hello" in own
    assert shape.unpack(own, 7) == chunk(7, "hello")
    assert shape.pack(chunk(7, "hello"), 8) is None  # its id line is not event 8's
    assert shape.pack(chunk(7, "x", rid="chatcmpl-2"), 7) is None  # another head
    assert shape.pack(b": keep-alive\n\n", 3) is None
    # Events with no id line (gRPC messages): their shared bytes all the same.
    plain = learn(b"H" * 40 + b"1" + b"T" * 10, b"H" * 40 + b"22" + b"T" * 10, 1, IDP)
    assert plain is not None and plain.id_prefix is None
    assert plain.unpack(plain.pack(b"H" * 40 + b"333" + b"T" * 10, 9) or b"", 9) == (
        b"H" * 40 + b"333" + b"T" * 10
    )
    # Too little in common: nothing is learned.
    assert learn(b"a" * (MIN_SHARED - 1) + b"x", b"a" * (MIN_SHARED - 1) + b"y", 1, IDP) is None


def test_head_and_tail_never_overlap() -> None:
    shape = Shape(None, b"abc", b"cde")
    assert shape.pack(b"abcde", 1) is None  # (c would be both)
    assert shape.pack(b"abccde", 1) == b""
    assert shape.unpack(b"", 1) == b"abccde"


def test_a_log_gives_back_every_event_as_it_was_given_and_counts_what_it_keeps() -> None:
    rng = random.Random(11)
    for trial in range(40):
        store = StreamStore(Limits(8, 1 << 30, 60.0), 50, 1 << 30, None, FakeClock())
        log = store.open("t", "sse")
        assert log is not None
        prefix = b"id: " + log.sid.encode() + b":"
        given: list[bytes] = []
        for _ in range(rng.randrange(1, 120)):
            seq = log.next_seq
            kind = rng.random()
            if kind < 0.8:
                text = "".join(rng.choice('ab \\"é') for _ in range(rng.randrange(4)))
                frame = chunk(seq, text).replace(IDP, prefix, 1)
            elif kind < 0.9:
                frame = b"data: [DONE]\n\n"
            else:  # another shape, with the right id line
                frame = prefix + b"%d\nevent: x\ndata: {}\n\n" % seq
            given.append(frame)
            if rng.random() < 0.3:
                extra = chunk(seq + 1, "z").replace(IDP, prefix, 1)
                given.append(extra)
                log.extend([frame, extra])
            else:
                log.append(frame)
        first = log.first
        assert first == max(1, len(given) - 50 + 1)  # (its newest 50)
        for after in range(first - 1, log.next_seq + 1):
            assert log.since(after) == given[after:], (trial, after)
            limit = rng.randrange(1, 8)
            assert log.since(after, limit) == given[after : after + limit], (trial, after, limit)
        assert log.last() == given[-1]
        kept = log.events.kept_bytes() + EVENT_OVERHEAD * len(log.events)
        assert log.nbytes == store.nbytes == kept
    # And a stream of chunks is kept in far fewer bytes than it was sent in.
    store = StreamStore(Limits(8, 1 << 30, 60.0), 1000, 1 << 30, None, FakeClock())
    log = store.open("t", "sse")
    assert log is not None
    prefix = b"id: " + log.sid.encode() + b":"
    sent = [chunk(s, "word").replace(IDP, prefix, 1) for s in range(1, 101)]
    for f in sent:
        log.append(f)
    assert log.since(0) == sent
    assert log.events.kept_bytes() < sum(map(len, sent)) / 10


def test_a_stream_whose_first_events_differ_from_the_rest_learns_their_shape_too() -> None:
    # A Responses stream: two whole responses first (alike), then the text's deltas.
    store = StreamStore(Limits(8, 1 << 30, 60.0), 10_000, 1 << 30, None, FakeClock())
    log = store.open("t", "sse")
    assert log is not None
    response = b'{"id":"resp_1","status":"%s","output":[],"usage":null' + b',"x":0' * 40 + b"}"
    sent = [
        b"event: response.created\ndata: " + response % b"queued" + b"\n\n",
        b"event: response.in_progress\ndata: " + response % b"in_progress" + b"\n\n",
    ]
    sent += [
        b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
        b'"item_id":"msg_1","output_index":0,"content_index":0,"delta":"w%d",'
        b'"sequence_number":%d}\n\n' % (i, i + 3)
        for i in range(300)
    ]
    for e in sent:
        log.append(e)
    assert log.since(0) == sent
    assert log.events.kept_bytes() < sum(map(len, sent)) / 3
    assert log.nbytes == store.nbytes == log.events.kept_bytes() + EVENT_OVERHEAD * len(sent)


def test_a_streams_own_bounds_count_its_events_whole() -> None:
    # Packed or not, a stream keeps no more than a replay of max_stream_bytes.
    store = StreamStore(Limits(8, 1 << 30, 60.0), 10_000, 5_000, None, FakeClock())
    log = store.open("t", "sse")
    assert log is not None
    prefix = b"id: " + log.sid.encode() + b":"
    sent = []
    for s in range(1, 201):
        sent.append(chunk(s, f"w{s}").replace(IDP, prefix, 1))
        log.append(sent[-1])
    replay = log.since(log.first - 1)
    assert replay is not None and replay == sent[log.first - 1 :]
    assert log.first > 150  # (most dropped: each chunk is ~250 bytes whole)
    assert log.whole_bytes == sum(map(len, replay)) + EVENT_OVERHEAD * len(replay) <= 5_000
    assert log.nbytes < log.whole_bytes / 2  # (what they take, packed)


def test_a_stream_at_its_bound_lets_its_dropped_events_go() -> None:
    # 20,000 events through a stream that keeps its newest 50: what it holds stays what 50
    # events take (the dropped ones leave its buffer in bulk), and the newest 50 replay whole.
    store = StreamStore(Limits(8, 1 << 30, 60.0), 50, 1 << 30, None, FakeClock())
    log = store.open("t", "sse")
    assert log is not None
    prefix = b"id: " + log.sid.encode() + b":"
    sent = [chunk(s, f"w{s % 97}").replace(IDP, prefix, 1) for s in range(1, 20_001)]
    streams = (tracemalloc.Filter(True, "*/gateway/streams/*"),)  # (what the store allocates)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot().filter_traces(streams)
        for frame in sent:
            log.append(frame)
        after = tracemalloc.take_snapshot().filter_traces(streams)
    finally:
        tracemalloc.stop()
    held = sum(d.size_diff for d in after.compare_to(before, "filename"))
    assert log.since(log.first - 1) == sent[-50:]
    assert held < 4096, held  # (all 20,000 kept packed would take ~100 KB)


def test_the_store_events_bench_keeps_and_replays_its_streams() -> None:
    # (bench/store_events.py: its figures come from streams the store's code really keeps)
    figures = store_events.measure(streams=20, events=16)
    assert set(figures) == {"add_own_ns", "add_ns", "tail_ns"}
    assert all(0 < v < 1e9 for v in figures.values())
