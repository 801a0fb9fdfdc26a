"""The index of what each replica's engine caches: leading runs, removals, clears, guesses,
bounds."""

from __future__ import annotations

import pytest

from gateway.policy.routing.kv_index import KvIndex

A, B, C = "a", "b", "c"
NAMES = [11, 12, 13, 14, 15]


def index(**kw: float) -> KvIndex:
    kv = KvIndex(**kw)  # type: ignore[arg-type]
    kv.stored(A, NAMES[:4])
    kv.stored(B, NAMES[:2])
    return kv


@pytest.mark.parametrize(
    ("ask", "want"),
    [
        (NAMES, {A: 4, B: 2}),
        (NAMES[:1], {A: 1, B: 1}),
        ([99, *NAMES], {}),  # a first block nobody holds: no run at all
        ([11, 12, 99, 14], {A: 2, B: 2}),  # a run stops at its first missing block
        ([], {}),
    ],
)
def test_each_replica_gets_its_leading_run(ask: list[int], want: dict[str, int]) -> None:
    assert index().matched(ask, now=0) == want


def test_a_removed_block_ends_the_run_there_and_others_keep_theirs() -> None:
    kv = index()
    kv.removed(A, [12])
    assert kv.matched(NAMES, now=0) == {A: 1, B: 2}
    kv.removed(B, [11, 12, 99])  # (a name it never held: nothing)
    assert kv.matched(NAMES, now=0) == {A: 1}
    assert kv.size() == (3, 0)  # 11 (a), 13, 14 (a); 12 held by nobody is gone


def test_a_cleared_replica_holds_nothing_and_comes_back_with_new_events() -> None:
    kv = index()
    kv.cleared(A)
    assert kv.matched(NAMES, now=0) == {B: 2}
    assert kv.blocks(A) == 0 and kv.blocks(B) == 2
    kv.stored(A, NAMES)
    assert kv.matched(NAMES, now=0) == {A: 5, B: 2}


def test_a_forgotten_replica_frees_its_bit_for_another() -> None:
    kv = index()
    kv.forget(A)
    kv.stored(C, NAMES[:3])
    assert kv.matched(NAMES, now=0) == {B: 2, C: 3}
    assert kv.blocks(A) == 0
    kv.forget("never-seen")


def test_a_guess_counts_until_it_fades_or_the_engine_confirms_it() -> None:
    kv = index(speculative_s=2.0)
    kv.speculate(C, NAMES[:3], now=10.0)
    assert kv.matched(NAMES, now=11.0) == {A: 4, B: 2, C: 3}
    assert kv.matched(NAMES, now=12.0) == {A: 4, B: 2}  # faded
    kv.speculate(C, NAMES[:3], now=20.0)
    kv.stored(C, NAMES[:2])  # the engine confirms two of them
    assert kv.matched(NAMES, now=23.0) == {A: 4, B: 2, C: 2}
    assert kv.size() == (5 - 1, 0)  # (15 is nobody's; no guess left)


def test_a_guess_made_again_lasts_from_the_later_one() -> None:
    kv = KvIndex(speculative_s=2.0)
    kv.speculate(A, [1, 2], now=0.0)
    kv.speculate(A, [1, 2], now=1.5)
    assert kv.matched([1, 2], now=2.5) == {A: 2}
    assert kv.matched([1, 2], now=3.5) == {}


def test_a_guess_extends_a_confirmed_run() -> None:
    kv = index()
    kv.speculate(B, NAMES, now=0.0)  # (its first two it holds already)
    assert kv.matched(NAMES, now=1.0) == {A: 4, B: 5}
    kv.cleared(B)
    assert kv.matched(NAMES, now=1.0) == {A: 4}


def test_the_oldest_stored_block_goes_first_past_the_bound() -> None:
    kv = KvIndex(max_blocks=3)
    kv.stored(A, [1, 2, 3])
    kv.stored(B, [4])
    assert kv.size() == (3, 0)
    assert kv.matched([1, 2, 3], now=0) == {}  # 1 is gone: no run from the start
    assert kv.matched([4], now=0) == {B: 1}
    assert kv.blocks(A) == 2


def test_guesses_are_bounded_too() -> None:
    kv = KvIndex(max_speculative=2, speculative_s=10.0)
    kv.speculate(A, [1, 2, 3], now=0.0)
    assert kv.matched([1], now=1.0) == {}  # the oldest guess went
    assert kv.matched([2, 3], now=1.0) == {A: 2}


@pytest.mark.parametrize(
    "kw", [{"max_blocks": 0}, {"max_speculative": -1}, {"speculative_s": -1.0}]
)
def test_bounds_below_their_floor_are_refused(kw: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        KvIndex(**kw)  # type: ignore[arg-type]


def test_many_replicas_each_get_their_own_run() -> None:
    kv = KvIndex()
    for r in range(80):  # (past 64: the masks are Python ints)
        kv.stored(f"r{r}", range(r % 7 + 1))
    got = kv.matched(list(range(7)), now=0)
    assert got == {f"r{r}": r % 7 + 1 for r in range(80)}
