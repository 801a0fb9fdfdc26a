from __future__ import annotations

import pytest

from gateway.policy.routing.hashing import str_hash64
from gateway.policy.routing.plugin import Scorer
from gateway.policy.routing.scorers import (
    KvUsage,
    Load,
    Prefix,
    PrefixParams,
    Session,
    SessionParams,
    load_bound,
    rendezvous,
    within,
)
from gateway.policy.routing.snapshot import Replica

from ._util import rep, req


@pytest.mark.parametrize(
    ("scorer", "replicas", "scores"),
    [
        pytest.param(
            Load(),
            [rep("a"), rep("b", running=8), rep("c", running=4, waiting=4, slots=4)],
            [1.0, 0.5, 1 / 3],
            id="load",
        ),
        pytest.param(
            Load(),
            [rep("a", inflight=4, running=2), rep("b", inflight=1, running=4)],
            [1 / 1.5, 1 / 1.5],
            id="load: ours in flight when fresher",
        ),
        pytest.param(
            KvUsage(),
            [rep("a"), rep("b", kv=0.25), rep("c", kv=1.5), rep("d", kv=-0.1)],
            [1.0, 0.75, 0.0, 1.0],
            id="kv usage, clamped",
        ),
    ],
)
def test_stateless_scorers(scorer: Scorer, replicas: list[Replica], scores: list[float]) -> None:
    got = scorer.score(req(), replicas, 0.0)
    assert got == pytest.approx(scores)
    assert all(0.0 <= s <= 1.0 for s in got)


@pytest.mark.parametrize(
    ("requests", "slots", "epsilon", "slack", "inside"),
    [
        ([0, 0, 0, 0], [8] * 4, 0.25, 0.0, [True] * 4),
        ([6, 0, 0, 0], [8] * 4, 0.25, 0.0, [False, True, True, True]),  # cap ceil(2.19) = 3
        ([1, 0, 0, 0], [8] * 4, 0.25, 0.0, [False, True, True, True]),  # cap ceil(0.63) = 1
        ([1, 1, 1, 0], [8] * 4, 0.25, 0.0, [True] * 4),  # cap ceil(1.25) = 2
        ([3, 0, 0, 0], [8] * 4, 0.25, 0.125, [False, True, True, True]),  # cap ceil(2.25) = 3
        ([3, 0, 0, 0], [8] * 4, 0.25, 0.25, [True] * 4),  # slack: 2 more per 8 slots
        ([20, 4, 4], [32, 8, 8], 0.0, 0.0, [False, True, True]),  # per slot: 21/32 > 29/48
        ([15, 4, 4], [32, 8, 8], 0.0, 0.0, [True, False, False]),
        ([10, 5, 5, 5], [256] * 4, 0.25, 0.0, [False, True, True, True]),
        ([10, 5, 5, 5], [256] * 4, 0.25, 0.1, [True] * 4),
    ],
)
def test_load_bound(
    requests: list[int], slots: list[int], epsilon: float, slack: float, inside: list[bool]
) -> None:
    replicas = [
        rep(str(i), running=n, slots=s)
        for i, (n, s) in enumerate(zip(requests, slots, strict=True))
    ]
    bound = load_bound(replicas, epsilon, slack)
    assert [within(r, bound) for r in replicas] == inside


NO_SLACK = PrefixParams(load_slack=0.0)


@pytest.mark.parametrize(
    ("params", "seen", "request_hashes", "replicas", "scores"),
    [
        pytest.param(NO_SLACK, {}, (1, 2), [rep("a"), rep("b")], [0.0, 0.0], id="nothing seen"),
        pytest.param(
            NO_SLACK, {"a": (1, 2, 3, 4)}, (), [rep("a"), rep("b")], [0.0, 0.0], id="no hashes"
        ),
        pytest.param(
            NO_SLACK,
            {"a": (1, 2, 3, 4), "b": (1, 2)},
            (1, 2, 3, 4),
            [rep("a"), rep("b"), rep("c")],
            [1.0, 0.5, 0.0],
            id="longest match",
        ),
        pytest.param(
            NO_SLACK,
            {"a": (1, 2, 3, 4)},
            (1, 2, 7, 8),
            [rep("a"), rep("b")],
            [0.5, 0.0],
            id="partial match",
        ),
        pytest.param(
            NO_SLACK,
            {"a": (1, 2, 3, 4), "b": (1, 2)},
            (1, 2, 3, 4),
            [rep("a", running=6), rep("b"), rep("c")],
            [0.0, 0.5, 0.0],
            id="over the load bound: affinity ignored",
        ),
        pytest.param(
            PrefixParams(load_epsilon=None),
            {"a": (1, 2, 3, 4)},
            (1, 2, 3, 4),
            [rep("a", running=6), rep("b"), rep("c")],
            [1.0, 0.0, 0.0],
            id="no load bound",
        ),
        pytest.param(
            PrefixParams(load_slack=0.5),
            {"a": (1, 2, 3, 4)},
            (1, 2, 3, 4),
            [rep("a", running=6), rep("b"), rep("c")],
            [1.0, 0.0, 0.0],
            id="within the slack",
        ),
    ],
)
def test_prefix(
    params: PrefixParams,
    seen: dict[str, tuple[int, ...]],
    request_hashes: tuple[int, ...],
    replicas: list[Replica],
    scores: list[float],
) -> None:
    s = Prefix(params)
    for name, hashes in seen.items():
        s.picked(req(hashes=hashes), rep(name), 0.0)
    assert s.score(req(hashes=request_hashes), replicas, 0.0) == scores


def test_prefix_index_per_model_pool() -> None:
    s = Prefix(PrefixParams())
    s.picked(req("x", hashes=(1, 2)), rep("a"), 0.0)
    assert s.score(req("y", hashes=(1, 2)), [rep("a")], 0.0) == [0.0]
    assert s.score(req("x", hashes=(1, 2)), [rep("a")], 0.0) == [1.0]
    assert set(s.indexes) == {"x"}


def test_hot_prefix_spreads_under_the_bound() -> None:
    """One prefix sent over and over: affinity holds until the bound, then the prefix spills
    to a second replica and both own it."""
    s = Prefix(PrefixParams(load_slack=0.0))
    a, b = rep("a"), rep("b")
    s.picked(req(hashes=(1,)), a, 0.0)
    a.running = 4  # 5 > ceil(1.25 * 5 / 16 * 8) = 4
    assert s.score(req(hashes=(1,)), [a, b], 0.0) == [0.0, 0.0]
    s.picked(req(hashes=(1,)), b, 0.0)
    a.running = 0
    assert s.score(req(hashes=(1,)), [a, b], 0.0) == [1.0, 1.0]


def test_session_without_id_scores_nothing() -> None:
    assert Session(SessionParams()).score(req(), [rep("a"), rep("b")], 0.0) == [0.0, 0.0]


def test_session_picks_one_stably() -> None:
    s = Session(SessionParams())
    replicas = [rep(n) for n in "abcdef"]
    for sid in ("s1", "s2", "s3"):
        scores = s.score(req(session=sid), replicas, 0.0)
        assert sorted(scores) == [0.0] * 5 + [1.0]
        chosen = replicas[scores.index(1.0)].name
        backwards = replicas[::-1]
        again = s.score(req(session=sid), backwards, 0.0)
        assert backwards[again.index(1.0)].name == chosen


def test_session_moves_when_over_the_bound() -> None:
    s = Session(SessionParams(load_slack=0.0))
    replicas = [rep(n) for n in "abcd"]
    first = s.score(req(session="s"), replicas, 0.0).index(1.0)
    replicas[first].running = 8
    moved = s.score(req(session="s"), replicas, 0.0).index(1.0)
    assert moved != first
    off = Session(SessionParams(load_epsilon=None))
    assert off.score(req(session="s"), replicas, 0.0).index(1.0) == first


@pytest.mark.parametrize("n", [3, 10, 30])
def test_rendezvous_adding_a_replica_moves_about_1_over_n(n: int) -> None:
    before = [rep(f"r{i}") for i in range(n)]
    after = [*before, rep("new")]
    sessions = [str_hash64(f"session-{i}") for i in range(6000)]
    moved = 0
    for key in sessions:
        old = before[rendezvous(key, before)].name
        new = after[rendezvous(key, after)].name
        if new != old:
            assert new == "new"  # only sessions that the new replica wins move
            moved += 1
    assert moved / len(sessions) == pytest.approx(1 / (n + 1), rel=0.2)


def test_rendezvous_removing_a_replica_moves_only_its_sessions() -> None:
    full = [rep(f"r{i}") for i in range(8)]
    less = full[:3] + full[4:]
    for i in range(2000):
        key = str_hash64(f"s{i}")
        old = full[rendezvous(key, full)].name
        if old != "r3":
            assert less[rendezvous(key, less)].name == old
