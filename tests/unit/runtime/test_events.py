"""The runtime's event queue: in order, once per drain, a failing handler ends its event only."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gateway.runtime import events as ev
from gateway.runtime.events import EventQueue


@dataclass(frozen=True)
class A:
    n: int


@dataclass(frozen=True)
class B:
    n: int


def queue() -> tuple[EventQueue, list[object]]:
    scheduled: list[object] = []
    return EventQueue(schedule=scheduled.append), scheduled


def test_events_wait_for_the_drain_and_are_handled_in_order() -> None:
    q, scheduled = queue()
    seen: list[object] = []
    q.register(A, seen.append)
    q.register(B, seen.append)
    q.post(A(1))
    q.post(B(2))
    q.post(A(3))
    assert not seen and len(scheduled) == 1  # one drain scheduled for all three
    q.drain()
    assert seen == [A(1), B(2), A(3)]


def test_what_a_handler_posts_is_handled_in_the_same_drain() -> None:
    q, scheduled = queue()
    seen: list[int] = []

    def on_a(e: A) -> None:
        seen.append(e.n)
        if e.n < 3:
            q.post(A(e.n + 1))

    q.register(A, on_a)
    q.post(A(1))
    q.drain()
    assert seen == [1, 2, 3] and len(scheduled) == 1


def test_a_failing_handler_ends_its_event_only(caplog: pytest.LogCaptureFixture) -> None:
    q, _ = queue()
    seen: list[int] = []
    errors: list[tuple[object, Exception]] = []

    def on_a(e: A) -> None:
        if e.n == 2:
            raise ValueError("boom")
        seen.append(e.n)

    q.register(A, on_a)
    q.on_error = lambda e, x: errors.append((e, x))
    for n in (1, 2, 3):
        q.post(A(n))
    q.drain()
    assert seen == [1, 3]
    [(event, error)] = errors
    assert event == A(2) and isinstance(error, ValueError)
    assert "handling A failed" in caplog.text


def test_a_drain_is_bounded_and_the_rest_waits_for_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ev, "MAX_PER_DRAIN", 2)
    q, scheduled = queue()
    seen: list[int] = []
    q.register(A, lambda e: seen.append(e.n))
    for n in range(5):
        q.post(A(n))
    q.drain()
    assert seen == [0, 1] and len(scheduled) == 2
    q.drain()
    q.drain()
    assert seen == [0, 1, 2, 3, 4] and len(q) == 0
