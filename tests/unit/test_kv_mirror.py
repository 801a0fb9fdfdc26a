"""The sidecar's mirror of its engine's prefix cache: a snapshot per link, then coalesced,
bounded changes."""

from __future__ import annotations

from engine_sidecar.kv_mirror import KvMirror, KvView


def told(view: KvView) -> tuple[bool, set[int], set[int]] | None:
    msg = view.take()
    return None if msg is None else (msg.cleared, set(msg.removed), set(msg.stored))


def test_a_new_link_gets_a_snapshot_then_only_the_changes() -> None:
    m = KvMirror(16)
    m.stored([1, 2, 3])
    wakes: list[int] = []
    v = m.view(lambda: wakes.append(1))
    assert told(v) == (True, set(), {1, 2, 3})
    assert told(v) is None
    m.removed([2])
    m.stored([4])
    assert wakes == [1, 1]
    assert told(v) == (False, {2}, {4})


def test_changes_that_cancel_out_before_the_message_cost_nothing() -> None:
    m = KvMirror(16)
    m.stored([1])
    v = m.view(lambda: None)
    v.take()
    m.stored([2])
    m.removed([2])  # stored and evicted within one step
    m.removed([1])
    m.stored([1])  # evicted and stored again
    assert told(v) is None


def test_what_the_engine_says_twice_or_out_of_turn_changes_nothing() -> None:
    m = KvMirror(16)
    v = m.view(lambda: None)
    v.take()
    m.stored([1])
    m.stored([1])
    m.removed([7])
    assert told(v) == (False, set(), {1})
    assert m.held == {1}


def test_ordered_events_are_applied_in_their_order() -> None:
    m = KvMirror(16)
    v = m.view(lambda: None)
    v.take()
    m.apply([(1, True), (1, False), (2, True), (3, True), (3, False), (3, True)])
    assert m.held == {2, 3}
    assert told(v) == (False, set(), {2, 3})


def test_cleared_tells_every_link_to_drop_everything() -> None:
    m = KvMirror(16)
    m.stored([1, 2])
    v = m.view(lambda: None)
    v.take()
    m.removed([1])
    m.cleared()
    m.stored([5])
    assert told(v) == (True, set(), {5})


def test_a_link_that_falls_behind_gets_a_snapshot_instead_of_unbounded_changes() -> None:
    m = KvMirror(16, max_pending=4)
    v = m.view(lambda: None)
    v.take()
    m.stored(range(3))
    m.removed(range(3))  # nothing pending any more
    m.stored(range(10, 16))  # 6 pending, over 4, but a snapshot would be as large
    assert m.resyncs == 0
    assert told(v) == (False, set(), set(range(10, 16)))
    m.removed(range(10, 15))  # 5 pending, 1 held: the snapshot is smaller
    assert m.resyncs == 1
    m.stored([20])
    assert told(v) == (True, set(), {15, 20})


def test_a_mirror_past_its_bound_clears() -> None:
    m = KvMirror(16, max_blocks=3)
    v = m.view(lambda: None)
    m.stored([1, 2, 3, 4])
    assert m.held == set()
    assert told(v) == (True, set(), set())


def test_a_closed_view_hears_nothing_more() -> None:
    m = KvMirror(16)
    wakes: list[int] = []
    v = m.view(lambda: wakes.append(1))
    v.close()
    m.stored([1])
    assert wakes == [] and m.views == set()


def test_a_name_said_twice_in_one_call_counts_once() -> None:
    m = KvMirror(16)
    m.stored([1])
    v = m.view(lambda: None)
    v.take()
    m.removed([1])
    m.stored([1, 1])
    m.removed([1])
    assert m.held == set()
    assert told(v) == (False, {1}, set())
    m.stored([2])
    m.removed([2, 2])
    m.stored([2])
    assert told(v) == (False, set(), {2})


async def test_a_link_that_ends_at_its_first_message_leaves_no_view_behind() -> None:
    import asyncio
    from collections.abc import AsyncIterator
    from typing import Any

    from shardgate.v1 import engine_pb2 as pb

    from engine_sidecar.backends.sim import SimConfig
    from engine_sidecar.backends.sim.engine import SimBackend
    from engine_sidecar.hub import Hub
    from engine_sidecar.link import LinkSession

    backend = SimBackend(SimConfig())
    mirror = KvMirror(16)
    mirror.stored([7])
    sessions: set[LinkSession] = set()
    session = LinkSession(
        Hub(backend), pb.InfoReply, backend.load, 1.0, 100, lambda: True, sessions, mirror
    )

    async def nothing() -> AsyncIterator[Any]:
        await asyncio.Event().wait()
        yield  # (never)

    link = session.run(nothing())
    first = await link.__anext__()
    assert first.kv is not None and first.kv.cleared and list(first.kv.stored) == [7]
    assert len(mirror.views) == 1 and sessions == {session}
    await link.aclose()  # (the transport gave up on it: a cancelled call, a write timeout)
    assert mirror.views == set() and sessions == set()
