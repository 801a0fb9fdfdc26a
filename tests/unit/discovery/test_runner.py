from __future__ import annotations

from gateway.config.schema import SidecarEndpoint
from gateway.discovery.runner import Discovery, ErrorKind, Sink
from gateway.policy.discovery import Member, MemberState


class _NoSource:
    async def run(self, sink: Sink) -> None:
        raise AssertionError("never started")


def _make() -> tuple[Discovery, list[list[str]], list[float]]:
    changes: list[list[str]] = []
    now = [100.0]

    def on_change(endpoints: list[SidecarEndpoint]) -> None:
        changes.append([e.name for e in endpoints])

    return Discovery(_NoSource(), on_change, clock=lambda: now[0]), changes, now


def test_views_change_the_set_and_failures_keep_it_marked_stale() -> None:
    d, changes, now = _make()
    assert d.stale and d.age_s() is None  # nothing known yet
    a, b = Member("a", "10.0.0.1:1"), Member("b", "10.0.0.2:1")
    d.synced({"a": a, "b": b})
    assert changes == [["a", "b"]] and not d.stale and d.age_s() == 0
    d.synced({"a": a, "b": b})
    assert len(changes) == 1  # the same view: the fleet is not touched
    now[0] += 7
    d.failed(ErrorKind.WATCH, "connection reset")
    assert d.stale and d.age_s() == 7 and [e.name for e in d.endpoints()] == ["a", "b"]
    assert len(changes) == 1 and d.errors[ErrorKind.WATCH] == 1
    d.failed(ErrorKind.EXPIRED, "410")
    assert d.errors[ErrorKind.EXPIRED] == 1
    d.synced({"a": a, "b": Member("b", "10.0.0.2:1", MemberState.DRAINING)})
    assert changes[-1] == ["a"] and not d.stale and d.age_s() == 0


def test_a_410_alone_does_not_mark_the_set_stale() -> None:
    d, _, _ = _make()
    d.synced({})
    d.failed(ErrorKind.EXPIRED, "410")
    assert not d.stale and d.errors[ErrorKind.EXPIRED] == 1
