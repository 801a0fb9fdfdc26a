from __future__ import annotations

import pytest

from gateway.policy.routing.replicas import assemble, broken_since
from gateway.policy.routing.snapshot import EndpointSnapshot

from ._util import DOWN, SUSPECT, UP, info, load, snap

# name -> (address, members, whole, missing ranks, health, ready, routable)
Row = tuple[str, tuple[str, ...], bool, tuple[int, ...], object, bool, bool]


@pytest.mark.parametrize(
    ("endpoints", "replicas", "stray"),
    [
        pytest.param(
            [snap("a"), snap("b")],
            {
                "a": ("a:1", ("a",), True, (), UP, True, True),
                "b": ("b:1", ("b",), True, (), UP, True, True),
            },
            [],
            id="standalone sidecars",
        ),
        pytest.param(
            [snap("n1", group="g", rank=1, world=2), snap("n0", group="g", rank=0, world=2)],
            {"g": ("n0:1", ("n0", "n1"), True, (), UP, True, True)},
            [],
            id="group: rank 0 address even when listed last",
        ),
        pytest.param(
            [snap(f"n{i}", group="g", rank=i, world=8) for i in (0, 1, 2, 3, 5, 6, 7)],
            {
                "g": (
                    "n0:1",
                    ("n0", "n1", "n2", "n3", "n5", "n6", "n7"),
                    False,
                    (4,),
                    UP,
                    True,
                    False,
                )
            },
            [],
            id="incomplete TP=8 group",
        ),
        pytest.param(
            [snap("n0", group="g", world=2), snap("n1", group="g", rank=1, world=2, health=DOWN)],
            {"g": ("n0:1", ("n0", "n1"), False, (1,), DOWN, True, False)},
            [],
            id="dead rank",
        ),
        pytest.param(
            [snap("n0", group="g", world=2, health=DOWN), snap("n1", group="g", rank=1, world=2)],
            {"g": ("n0:1", ("n0", "n1"), False, (0,), DOWN, True, False)},
            [],
            id="dead rank 0",
        ),
        pytest.param(
            [
                snap("n0", group="g", world=2, health=SUSPECT),
                snap("n1", group="g", rank=1, world=2),
            ],
            {"g": ("n0:1", ("n0", "n1"), True, (), SUSPECT, True, True)},
            [],
            id="suspect rank stays whole and routable",
        ),
        pytest.param(
            [snap("n0", group="g", world=2), snap("n1", group="g", rank=1, world=2, ready=False)],
            {"g": ("n0:1", ("n0", "n1"), True, (), UP, False, False)},
            [],
            id="unready rank: whole but not routable",
        ),
        pytest.param(
            [snap("a", reported=False)],
            {"a": ("a:1", ("a",), True, (), UP, False, False)},
            [],
            id="no load report yet: not ready",
        ),
        pytest.param(
            [snap("a", health=DOWN)],
            {"a": ("a:1", ("a",), False, (0,), DOWN, True, False)},
            [],
            id="standalone down",
        ),
        pytest.param(
            [snap("a", stalled=True)],
            {"a": ("a:1", ("a",), True, (), SUSPECT, True, True)},
            [],
            id="standalone stalled: SUSPECT, still routable (ejection takes it out)",
        ),
        pytest.param(
            [snap("n0", group="g", world=2), snap("n1", group="g", rank=1, world=2, stalled=True)],
            {"g": ("n0:1", ("n0", "n1"), True, (), SUSPECT, True, True)},
            [],
            id="stalled rank 1: the group is whole and SUSPECT",
        ),
        pytest.param(
            [snap("a", stalled=True, health=DOWN)],
            {"a": ("a:1", ("a",), False, (0,), DOWN, True, False)},
            [],
            id="stalled and DOWN: DOWN",
        ),
        pytest.param(
            [snap("n1", group="g", rank=1, world=2), snap("x", announced=False)],
            {},
            ["x", "n1"],
            id="headless group and unannounced sidecar are stray",
        ),
        pytest.param(
            [
                snap("n0", group="g", world=2),
                snap("n1", group="g", rank=1, world=2),
                snap("n2", group="g", rank=2, world=2),
                snap("n3", group="g", rank=1, world=4),
            ],
            {"g": ("n0:1", ("n0", "n1"), True, (), UP, True, True)},
            ["n2", "n3"],
            id="rank outside world size, world size mismatch",
        ),
        pytest.param(
            [
                snap("n0", group="g", world=2),
                snap("old", group="g", rank=1, world=2, health=DOWN),
                snap("new", group="g", rank=1, world=2),
            ],
            {"g": ("n0:1", ("n0", "new"), True, (), UP, True, True)},
            ["old"],
            id="live duplicate rank replaces a dead one",
        ),
        pytest.param(
            [
                snap("dead0", group="g", world=2, health=DOWN),
                snap("n0", group="g", world=2),
                snap("n1", group="g", rank=1, world=2),
            ],
            {"g": ("n0:1", ("n0", "n1"), True, (), UP, True, True)},
            ["dead0"],
            id="live duplicate rank 0 is the head",
        ),
        pytest.param(
            [snap("g"), snap("n0", group="g")],
            {"g": ("g:1", ("g",), True, (), UP, True, True)},
            ["n0"],
            id="name taken",
        ),
    ],
)
def test_assemble(
    endpoints: list[EndpointSnapshot], replicas: dict[str, Row], stray: list[str]
) -> None:
    a = assemble(endpoints)
    got = {
        r.name: (r.address, r.members, r.whole, r.missing_ranks, r.health, r.ready, r.routable)
        for r in a.replicas
    }
    assert got == replicas
    assert sorted(a.stray) == sorted(stray)


def test_live_figures_come_from_rank_0() -> None:
    n0 = snap("n0", group="g", world=2, running=3, inflight=5)
    n1 = snap("n1", group="g", rank=1, world=2, running=7)
    (r,) = assemble([n1, n0]).replicas
    assert (r.running, r.inflight, r.max_num_seqs, r.head) == (3, 5, 8, "n0")
    assert r.requests == 5 and r.occupancy == 5 / 8
    assert r.key != 0


def test_report_slots_override_info() -> None:
    e = EndpointSnapshot("a", "a:1", info(max_num_seqs=8), load(slots=32), UP)
    (r,) = assemble([e]).replicas
    assert r.max_num_seqs == 32


def test_pools_by_model() -> None:
    a = assemble([snap("a", models=("x", "y")), snap("b", models=("y",)), snap("c", health=DOWN)])
    assert [r.name for r in a.pool("y")] == ["a", "b"]
    assert [r.name for r in a.pool("x")] == ["a"]
    assert a.knows("m") and not a.knows("z") and a.pool("z") == ()


@pytest.mark.parametrize(
    ("after", "broken"),
    [
        pytest.param(
            [snap("a"), snap("n0", group="g", world=2), snap("n1", group="g", rank=1, world=2)],
            [],
            id="same",
        ),
        pytest.param([snap("a"), snap("n0", group="g", world=2)], ["g"], id="rank lost"),
        pytest.param(
            [
                snap("a"),
                snap("n0", group="g", world=2),
                snap("n1", group="g", rank=1, world=2, health=DOWN),
            ],
            ["g"],
            id="rank down",
        ),
        pytest.param(
            [
                snap("a", health=SUSPECT),
                snap("n0", group="g", world=2),
                snap("n1", group="g", rank=1, world=2),
            ],
            [],
            id="suspect is not broken",
        ),
        pytest.param(
            [
                snap("a", stalled=True),
                snap("n0", group="g", world=2),
                snap("n1", group="g", rank=1, world=2),
            ],
            [],
            id="stalled is not broken (its ejection, if the cap allows, moves its requests)",
        ),
        pytest.param(
            [snap("n0", group="g", world=2), snap("n1", group="g", rank=1, world=2)],
            ["a"],
            id="gone",
        ),
        pytest.param(
            [snap("a"), snap("x0", group="g", world=2), snap("n1", group="g", rank=1, world=2)],
            ["g"],
            id="new rank-0 sidecar",
        ),
    ],
)
def test_broken_since(after: list[EndpointSnapshot], broken: list[str]) -> None:
    before = assemble(
        [
            snap("a"),
            snap("n0", group="g", world=2),
            snap("n1", group="g", rank=1, world=2),
            snap("b", health=DOWN),
        ]
    )
    assert [r.name for r in broken_since(before, assemble(after))] == broken
