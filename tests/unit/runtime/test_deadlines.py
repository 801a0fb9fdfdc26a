"""The deadline wheel: every entry expires once, at its time or within a tick after it, never
before; a removed one never; one loop timer, set for the earliest entry."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.runtime.deadlines import TICK_S, Deadlines


class Loop:
    """A loop's clock and timers, moved by the test."""

    def __init__(self) -> None:
        self.now = 100.0
        self.timers: list[Loop.Handle] = []
        self.errors: list[dict[str, Any]] = []

    class Handle:
        def __init__(self, when: float, fn: Callable[[], object]) -> None:
            self.when, self.fn, self.cancelled = when, fn, False

        def cancel(self) -> None:
            self.cancelled = True

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], object], /) -> Loop.Handle:
        h = Loop.Handle(when, callback)
        self.timers.append(h)
        return h

    def call_exception_handler(self, context: dict[str, Any], /) -> None:
        self.errors.append(context)

    @property
    def armed(self) -> list[float]:
        return [h.when for h in self.timers if not h.cancelled]

    fired = 0

    def fires_at(self, when: float) -> float:
        """The clock when a timer for `when` fires."""
        return when

    def run_until(self, t: float) -> None:
        """Fire each due timer in time order, the clock at its time (as a loop would)."""
        while True:
            due = [h for h in self.timers if not h.cancelled and h.when <= t]
            if not due:
                break
            h = min(due, key=lambda h: h.when)
            self.timers.remove(h)
            self.now = max(self.now, self.fires_at(h.when))
            h.fn()
            self.fired += 1
            assert self.fired < 10_000, "the wheel's timer spins"
        self.now = t


class Owner:
    def __init__(self, loop: Loop, name: str, log: list[tuple[str, float]]) -> None:
        self.loop, self.name, self.log = loop, name, log

    def expire(self) -> None:
        self.log.append((self.name, self.loop.now))


@pytest.mark.parametrize(
    ("adds", "removes", "until", "expired"),
    [
        ([("a", 100.5)], [], 101.0, ["a"]),
        ([("a", 100.5)], [], 100.49, []),
        ([("a", 100.5), ("b", 100.2)], [], 101.0, ["b", "a"]),  # in time order
        ([("a", 100.5), ("b", 100.5)], ["a"], 101.0, ["b"]),
        ([("a", 100.5)], ["a"], 101.0, []),
        ([("a", 100.001), ("b", 100.009)], [], 101.0, ["a", "b"]),  # one tick, both
    ],
)
def test_entries_expire_in_order_unless_removed(
    adds: list[tuple[str, float]], removes: list[str], until: float, expired: list[str]
) -> None:
    loop, log = Loop(), list[tuple[str, float]]()
    wheel = Deadlines(loop)
    ticks: dict[str, int] = {}
    owners = {name: Owner(loop, name, log) for name, _ in adds}
    for name, when in adds:
        ticks[name] = wheel.add(owners[name], when)
    for name in removes:
        wheel.remove(owners[name], ticks[name])
    loop.run_until(until)
    assert [name for name, _ in log] == expired
    assert len(wheel) == len(adds) - len(removes) - len(expired)


def test_one_loop_timer_for_the_earliest_entry() -> None:
    loop, log = Loop(), list[tuple[str, float]]()
    wheel = Deadlines(loop)
    for i in range(100):
        wheel.add(Owner(loop, str(i), log), 200.0 - i)  # each earlier than the one before
    assert len(loop.armed) == 1 and loop.armed[0] == pytest.approx(101.0)
    loop.run_until(101.0)
    assert [n for n, _ in log] == ["99"] and len(loop.armed) == 1


def test_an_owner_that_adds_again_as_it_expires_expires_later() -> None:
    loop, log = Loop(), list[tuple[str, float]]()
    wheel = Deadlines(loop)

    class Again(Owner):
        def expire(self) -> None:
            super().expire()
            if len(self.log) < 3:
                wheel.add(self, self.loop.now + 1.0)

    wheel.add(Again(loop, "a", log), 100.5)
    loop.run_until(110.0)
    assert [round(t, 2) for _, t in log] == [100.5, 101.5, 102.5]


def test_an_owner_that_raises_does_not_stop_the_others() -> None:
    loop, log = Loop(), list[tuple[str, float]]()
    wheel = Deadlines(loop)

    class Broken(Owner):
        def expire(self) -> None:
            raise RuntimeError("bug")

    wheel.add(Broken(loop, "x", log), 100.5)
    wheel.add(Owner(loop, "b", log), 100.5)
    loop.run_until(101.0)
    assert [n for n, _ in log] == ["b"]
    assert isinstance(loop.errors[0]["exception"], RuntimeError)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0.0, 5.0), st.booleans(), st.floats(0.0, 5.0)),
        min_size=1,
        max_size=40,
    )
)
def test_never_early_never_more_than_a_tick_late_never_twice(
    plan: list[tuple[float, bool, float]],
) -> None:
    """Entries added at random times for random delays, some removed later: each kept one
    expires once, in [when, when + TICK_S]; a removed one never."""
    loop, log = Loop(), list[tuple[str, float]]()
    wheel = Deadlines(loop)
    owners = [Owner(loop, str(i), log) for i in range(len(plan))]
    whens: dict[str, float] = {}
    steps = sorted(
        [(at, "add", i) for i, (at, _, _) in enumerate(plan)]
        + [(at + 0.5 * delay, "remove", i) for i, (at, rm, delay) in enumerate(plan) if rm]
    )
    ticks: dict[int, int] = {}
    removed: set[str] = set()
    for at, what, i in steps:
        loop.run_until(100.0 + at)
        o = owners[i]
        if what == "add":
            whens[o.name] = loop.now + plan[i][2]
            ticks[i] = wheel.add(o, whens[o.name])
        elif all(name != o.name for name, _ in log):
            wheel.remove(o, ticks[i])
            removed.add(o.name)
    loop.run_until(120.0)
    names = [n for n, _ in log]
    assert len(names) == len(set(names))
    assert set(names) == set(whens) - removed
    for name, t in log:
        assert whens[name] <= t + 1e-9 <= whens[name] + TICK_S + 1e-9
    assert len(wheel) == 0 and not loop.armed and not math.isnan(loop.now)


def test_an_owner_removed_by_another_s_expiry_in_the_same_tick_does_not_expire() -> None:
    loop, log = Loop(), list[tuple[str, float]]()
    wheel = Deadlines(loop)
    b = Owner(loop, "b", log)
    c = Owner(loop, "c", log)
    ticks: dict[str, int] = {}

    class Closer(Owner):
        def expire(self) -> None:
            super().expire()
            wheel.remove(b, ticks["b"])  # (say, a group's first expiry ends the others)
            wheel.remove(c, ticks["c"])

    ticks["a"] = wheel.add(Closer(loop, "a", log), 100.5)
    ticks["b"] = wheel.add(b, 100.5)
    ticks["c"] = wheel.add(c, 100.6)
    loop.run_until(101.0)
    assert [n for n, _ in log] == ["a"] and len(wheel) == 0


def test_an_owner_that_adds_again_for_a_time_past_expires_at_the_next_tick_not_in_a_loop() -> None:
    """(An owner whose limit has passed and that adds again for it, as it expires: it lands in
    the next tick, not in the bucket being expired, which would never empty.)"""
    loop, log = Loop(), list[tuple[str, float]]()
    wheel = Deadlines(loop)

    class Past(Owner):
        def expire(self) -> None:
            super().expire()
            if len(self.log) < 5:
                wheel.add(self, self.loop.now - 1.0)

    wheel.add(Past(loop, "a", log), 100.5)
    loop.run_until(101.0)
    times = [t for _, t in log]
    assert len(times) == 5
    assert all(b - a == pytest.approx(TICK_S) for a, b in itertools.pairwise(times))


class MsLoop(Loop):
    """uvloop's clock: whole milliseconds; a timer fires once that clock reaches its time."""

    def time(self) -> float:
        return math.floor(self.now * 1000 + 1e-6) / 1000

    def fires_at(self, when: float) -> float:
        return math.ceil(when * 1000 - 1e-6) / 1000


def test_on_a_clock_of_whole_milliseconds_each_tick_fires_once() -> None:
    """tick * TICK_S may come out a rounding step above the millisecond its timer fires at
    (6571893 * 0.01 == 65718.93000000001): the tick is due then all the same."""
    loop, log = MsLoop(), list[tuple[str, float]]()
    loop.now = 65718.9
    wheel = Deadlines(loop)
    for i in range(100):
        wheel.add(Owner(loop, str(i), log), 65718.9 + i * TICK_S + 0.005)
    loop.run_until(65725.0)
    assert len(log) == 100 and loop.fired == 100


def test_entries_removed_long_before_their_time_leave_the_heap_bounded() -> None:
    """Most requests end long before their deadline: their emptied buckets' ticks do not pile
    up in the heap until their time (one per request over a deadline's minutes)."""
    loop, log = Loop(), list[tuple[str, float]]()
    wheel = Deadlines(loop)
    live = [Owner(loop, "live", log)]
    wheel.add(live[0], 100.0 + 3600)
    for i in range(50_000):
        o = Owner(loop, str(i), log)
        wheel.remove(o, wheel.add(o, loop.now + 600.0))
        loop.now += 0.001  # (a request a millisecond, each ending at once)
    assert len(wheel) == 1 and not log
    assert len(wheel._ticks) <= 2 * len(wheel._buckets) + 1025
