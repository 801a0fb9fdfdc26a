"""The Responses API's bounded store (gateway.api.responses.store), with a fake clock."""

from __future__ import annotations

import asyncio

import pytest

from gateway.api.responses.store import EventLog, ResponseStore, Stored
from gateway.config.schema import ResponsesSettings
from gateway.types import InvalidRequest


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def store(clock: Clock, **settings: float) -> ResponseStore[str]:
    return ResponseStore(ResponsesSettings(**settings), clock)  # type: ignore[arg-type]


def entry(id: str, tenant: str = "t", log: EventLog | None = None, reserve: int = 0) -> Stored[str]:
    return Stored(id, tenant, id, log, reserve)


def test_a_log_numbers_its_events_and_reads_after_n() -> None:
    log = EventLog(1000)
    for seq in range(5):
        log.append(seq, b"e%d" % seq)
    assert log.after(-1) == [b"e0", b"e1", b"e2", b"e3", b"e4"]
    assert log.after(2) == [b"e3", b"e4"]
    assert log.after(4) == [] and log.after(9) == []
    with pytest.raises(ValueError):
        log.append(7, b"gap")
    log.close()
    with pytest.raises(ValueError):
        log.append(5, b"late")


def test_a_log_drops_its_earliest_events_past_its_bound() -> None:
    log = EventLog(10)
    for seq in range(6):
        log.append(seq, b"abcd")  # 4 bytes each: two fit
    assert log.bytes == 8 and log.next_seq == 6
    assert log.after(3) == [b"abcd", b"abcd"]
    with pytest.raises(InvalidRequest) as err:
        log.after(2)
    assert err.value.param == "starting_after"


async def test_a_follower_wakes_on_an_event_and_on_close() -> None:
    log = EventLog(100)
    waiter = asyncio.create_task(log.wait(-1, 10.0))
    await asyncio.sleep(0)
    assert not waiter.done()
    log.append(0, b"x")
    await asyncio.wait_for(waiter, 5.0)
    waiter = asyncio.create_task(log.wait(0, 10.0))
    await asyncio.sleep(0)
    log.close()
    await asyncio.wait_for(waiter, 5.0)
    await asyncio.wait_for(log.wait(0, 10.0), 5.0)  # closed: at once


async def test_a_follower_waits_no_longer_than_its_timeout() -> None:
    await asyncio.wait_for(EventLog(100).wait(-1, 0.01), 5.0)


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


def test_bytes_count_a_running_log_at_its_bound_and_a_finished_one_as_it_is() -> None:
    s = store(Clock(), max_bytes=1000)
    log = EventLog(600)
    a = entry("a", log=log)
    assert s.add(a) and s.bytes == 600
    assert not s.add(entry("b", log=EventLog(600)))  # 1200 > 1000
    assert s.add(entry("c", reserve=300)) and s.bytes == 900
    log.append(0, b"x" * 50)
    log.close()
    s.finish(a, 20)
    assert s.bytes == 300 + 70
    assert s.add(entry("b", log=EventLog(600)))  # room now, without evicting a
    assert s.get("a", "t") is not None
    # A new entry that needs room evicts the finished ones.
    s.finish(s.get("c", "t") or entry("?"), 30)
    assert s.add(entry("d", reserve=350))
    assert s.get("a", "t") is None and s.bytes <= 1000
