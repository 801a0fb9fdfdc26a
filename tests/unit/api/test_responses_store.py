"""The Responses API's bounded store of responses (gateway.api.responses.store), and its
events' numbering in the stream store (gateway.api.responses.follow), with a fake clock."""

from __future__ import annotations

import pytest

from gateway.api.responses.follow import KIND, events_after
from gateway.api.responses.store import ResponseStore, Stored
from gateway.config.schema import ResponsesSettings
from gateway.streams.policy import Limits
from gateway.streams.store import StreamStore
from gateway.types import InvalidRequest


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def store(clock: Clock, **settings: float) -> ResponseStore[str]:
    return ResponseStore(ResponsesSettings(**settings), clock)  # type: ignore[arg-type]


def entry(id: str, tenant: str = "t", reserve: int = 0) -> Stored[str]:
    return Stored(id, tenant, id, None, reserve)


def stream_store(clock: Clock, **bounds: int) -> StreamStore:
    limits = Limits(bounds.get("max_streams", 10), bounds.get("max_bytes", 1 << 20), 60.0)
    events = bounds.get("max_stream_events", 1000)
    return StreamStore(limits, events, bounds.get("max_stream_bytes", 1 << 20), clock=clock)


def test_sequence_numbers_from_0_are_the_stream_logs_from_1() -> None:
    log = stream_store(Clock()).open("t", KIND)
    assert log is not None
    for seq in range(5):
        log.append(b"e%d" % seq)
    assert events_after(log, -1) == [b"e0", b"e1", b"e2", b"e3", b"e4"]
    assert events_after(log, 2) == [b"e3", b"e4"]
    assert events_after(log, 4) == [] and events_after(log, 9) == []


def test_events_past_the_stream_stores_bounds_are_no_longer_kept() -> None:
    log = stream_store(Clock(), max_stream_events=2).open("t", KIND)
    assert log is not None
    for _ in range(6):
        log.append(b"abcd")
    assert events_after(log, 3) == [b"abcd", b"abcd"]  # 4 and 5: the newest two
    with pytest.raises(InvalidRequest) as err:
        events_after(log, 2)
    assert err.value.param == "starting_after"
    assert "up to 3 are no longer kept" in err.value.message


def test_an_evicted_log_keeps_nothing_for_a_reader() -> None:
    clock = Clock()
    store = stream_store(clock)
    log = store.open("t", KIND)
    assert log is not None
    log.append(b"x")
    log.finish()
    clock.now = 61.0  # past the stream store's retention
    store.sweep()
    with pytest.raises(InvalidRequest):
        events_after(log, -1)
    assert store.get(log.sid, "t", KIND) is None


def test_only_its_tenant_gets_an_entry() -> None:
    s = store(Clock())
    assert s.add(entry("a", "t"))
    assert s.get("a", "t") is not None
    assert s.get("a", "u") is None and s.get("b", "t") is None


def test_finished_entries_expire_after_the_retention() -> None:
    clock = Clock()
    s = store(clock, retention_s=10.0)
    a, b = entry("a"), entry("b")
    s.add(a)
    s.add(b)
    s.finish(a, 100)
    clock.now = 5.0
    s.finish(b, 100)
    clock.now = 10.0
    assert s.get("a", "t") is None and s.get("b", "t") is not None
    clock.now = 15.0
    assert s.get("b", "t") is None and len(s) == 0 and s.bytes == 0


def test_running_entries_never_expire() -> None:
    clock = Clock()
    s = store(clock, retention_s=1.0)
    s.add(entry("a"))
    clock.now = 100.0
    assert s.get("a", "t") is not None


def test_when_full_the_oldest_finished_go_first_and_running_ones_never() -> None:
    s = store(Clock(), max_responses=2)
    a, b = entry("a"), entry("b")
    assert s.add(a) and s.add(b)
    assert not s.add(entry("c"))  # both run
    s.finish(b, 10)
    s.finish(a, 10)
    assert s.add(entry("c"))  # b finished first: it goes
    assert [x for x in "abc" if s.get(x, "t")] == ["a", "c"]


def test_bytes_count_a_running_entry_at_its_reserve_and_a_finished_one_as_it_is() -> None:
    s = store(Clock(), max_bytes=1000)
    a = entry("a", reserve=600)
    assert s.add(a) and s.bytes == 600
    assert not s.add(entry("b", reserve=600))  # 1200 > 1000
    assert s.add(entry("c", reserve=300)) and s.bytes == 900
    s.finish(a, 70)  # (its events are the stream store's: not counted here)
    assert s.bytes == 300 + 70
    assert s.add(entry("b", reserve=600))  # room now, without evicting a
    assert s.get("a", "t") is not None
    # A new entry that needs room evicts the finished ones.
    s.finish(s.get("c", "t") or entry("?"), 30)
    assert s.add(entry("d", reserve=350))
    assert s.get("a", "t") is None and s.bytes <= 1000
