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
