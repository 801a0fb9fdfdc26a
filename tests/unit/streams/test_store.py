"""The stream store: bounds per stream and per process, retention, readers, numbering."""

from __future__ import annotations

import asyncio

import pytest

from gateway.config.loader import ConfigError, parse
from gateway.streams.policy import Limits
from gateway.streams.sse import Tape, parse_last_event_id
from gateway.streams.store import EVENT_OVERHEAD as O
from gateway.streams.store import StreamStore
from tests.unit.policy._util import FakeClock


class Counters:
    def __init__(self) -> None:
        self.evictions: list[str] = []
        self.refusals = 0

    def evicted(self, reason: str) -> None:
        self.evictions.append(reason)

    def refused(self) -> None:
        self.refusals += 1


class Reader:
    def __init__(self) -> None:
        self.replaced_count = 0

    def replaced(self) -> None:
        self.replaced_count += 1


def store(
    clock: FakeClock,
    max_streams: int = 4,
    max_bytes: int = 1000,
    events: int = 100,
    stream_bytes: int = 500,
    counters: Counters | None = None,
) -> StreamStore:
    return StreamStore(Limits(max_streams, max_bytes, 60.0), events, stream_bytes, counters, clock)


def test_events_are_numbered_from_one_and_replayed_after_a_seq() -> None:
    s = store(FakeClock())
    log = s.open("t", "sse")
    assert log is not None
    assert log.next_seq == 1
    for i in range(5):
        log.append(b"e%d" % i)
    assert log.next_seq == 6
    assert log.since(0) == [b"e0", b"e1", b"e2", b"e3", b"e4"]
    assert log.since(3) == [b"e3", b"e4"]
    assert log.since(5) == []
    assert log.since(9) == []
    assert s.nbytes == 10 + 5 * O  # each event's bytes and its overhead


def test_a_stream_keeps_its_newest_events_within_its_bounds() -> None:
    s = store(FakeClock(), events=3, stream_bytes=1000)
    log = s.open("t", "sse")
    assert log is not None
    for i in range(5):
        log.append(b"e%d" % i)
    assert log.first == 3 and log.since(2) == [b"e2", b"e3", b"e4"]
    assert log.since(1) is None  # dropped: a reader cannot start there
    s = store(FakeClock(), events=100, stream_bytes=9 + O + 10)
    log = s.open("t", "sse")
    assert log is not None
    log.append(b"ab")
    log.append(b"123456789")  # only it fits in its bytes (with its overhead)
    assert log.first == 2 and log.since(1) == [b"123456789"] and log.nbytes == 9 + O == s.nbytes


def test_the_process_bound_evicts_finished_streams_then_trims_the_writer() -> None:
    clock = FakeClock()
    counters = Counters()
    s = store(clock, max_bytes=20 + 2 * O, stream_bytes=1000, counters=counters)
    done = s.open("t", "sse")
    live = s.open("t", "sse")
    assert done is not None and live is not None
    done.append(b"x" * 10)
    done.finish()
    live.append(b"y" * 8)
    live.append(b"z" * 8)  # 26 > 20: the finished stream goes
    assert done.sid not in s.logs and s.nbytes == 16 + 2 * O
    assert counters.evictions == ["room"]
    live.append(b"w" * 8)  # 24 > 20, nothing finished left: its own oldest goes
    assert s.nbytes == 16 + 2 * O and live.first == 2


def test_the_earliest_finished_goes_first_and_the_finished_bytes_stay_counted() -> None:
    s = store(FakeClock(), max_bytes=30 + 3 * O, stream_bytes=1000)
    a, b, live = s.open("t", "sse"), s.open("t", "sse"), s.open("t", "sse")
    assert a is not None and b is not None and live is not None
    for log in (a, b, live):
        log.append(b"x" * 10)
    a.finish()
    b.finish()
    assert s.finished_nbytes == 20 + 2 * O
    live.append(b"y" * 5)  # over by 5 + O: the first to finish is enough
    assert set(s.logs) == {b.sid, live.sid}
    assert s.finished_nbytes == 10 + O == sum(s.logs[sid].nbytes for sid in s.finished)
    live.append(b"z" * 30)  # more than b could free: nothing finished goes for nothing
    assert b.sid in s.logs and s.finished_nbytes == b.nbytes


def test_a_full_store_refuses_new_streams_and_finished_ones_make_room() -> None:
    clock = FakeClock()
    counters = Counters()
    s = store(clock, max_streams=2, counters=counters)
    a, b = s.open("t", "sse"), s.open("t", "sse")
    assert a is not None and b is not None
    assert s.open("t", "sse") is None and counters.refusals == 1
    a.finish()
    c = s.open("t", "sse")
    assert c is not None and a.sid not in s.logs and set(s.logs) == {b.sid, c.sid}


def test_finished_streams_are_kept_for_their_retention() -> None:
    clock = FakeClock()
    counters = Counters()
    s = store(clock, counters=counters)
    log = s.open("t", "sse")
    assert log is not None
    log.append(b"e")
    log.finish()
    clock.advance(59.0)
    assert s.get(log.sid, "t", "sse") is log
    clock.advance(1.0)
    assert s.get(log.sid, "t", "sse") is None and s.nbytes == 0
    assert counters.evictions == ["expired"]


def test_only_the_tenant_and_the_kind_find_a_stream() -> None:
    s = store(FakeClock())
    log = s.open("t", "sse")
    assert log is not None
    assert s.get(log.sid, "t", "sse") is log
    assert s.get(log.sid, "u", "sse") is None
    assert s.get(log.sid, "t", "grpc") is None
    assert s.get("st_nope", "t", "sse") is None


def test_a_new_reader_replaces_the_one_before() -> None:
    clock = FakeClock()
    s = store(clock)
    log = s.open("t", "sse")
    assert log is not None
    one, two = Reader(), Reader()
    log.attach(one)
    log.attach(two)
    assert one.replaced_count == 1 and two.replaced_count == 0 and log.reader is two
    log.detach(one)  # (the replaced one leaving changes nothing)
    assert log.reader is two and not log.abandoned(0.0, clock())
    clock.advance(1.0)
    log.detach(two)
    assert log.abandoned(0.0, clock()) and not log.abandoned(5.0, clock())
    clock.advance(5.0)
    assert log.abandoned(5.0, clock())


async def test_an_append_wakes_the_reader() -> None:
    s = store(FakeClock())
    log = s.open("t", "sse")
    assert log is not None
    changed = log.changed()
    assert not changed.done()
    log.append(b"e")
    assert changed.done()
    changed = log.changed()
    log.finish()
    await asyncio.wait_for(changed, 1.0)


def test_the_tape_numbers_and_keeps_events_and_passes_comments() -> None:
    s = store(FakeClock())
    log = s.open("t", "sse")
    assert log is not None
    tape = Tape(log)
    sid = log.sid
    out = tape.stamp(b'data: {"a":1}\n\n: keep-alive\n\ndata: [DONE]\n\n')
    assert out == (
        f'id: {sid}:1\ndata: {{"a":1}}\n\n: keep-alive\n\nid: {sid}:2\ndata: [DONE]\n\n'.encode()
    )
    assert log.since(0) == [f'id: {sid}:1\ndata: {{"a":1}}\n\n'.encode(),
                            f"id: {sid}:2\ndata: [DONE]\n\n".encode()]  # fmt: skip
    assert tape.stamp(bytearray(b"data: x\n\n")) == f"id: {sid}:3\ndata: x\n\n".encode()


def test_last_event_ids() -> None:
    assert parse_last_event_id("st_a:12", "st_a") == 12
    assert parse_last_event_id(" st_a:0 ", "st_a") == 0
    for bad in ("st_b:12", "st_a:", "st_a:-1", "12", "st_a:1x", "st_a:" + "9" * 19):
        assert parse_last_event_id(bad, "st_a") is None


def test_a_streams_bytes_are_bounded_in_the_config() -> None:
    # (its buffer numbers its bytes in 32 bits: compact.py)
    gig = 1 << 30
    assert parse(f"gateway:\n  streams: {{max_stream_bytes: {gig}}}\n").gateway.streams
    with pytest.raises(ConfigError, match=r"gateway\.streams\.max_stream_bytes"):
        parse(f"gateway:\n  streams: {{max_stream_bytes: {gig + 1}}}\n")
