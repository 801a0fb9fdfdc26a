from __future__ import annotations

import pytest

from gateway.config.routing import EjectionSettings, RoutingSettings
from gateway.policy.ejection import OutlierDetector
from gateway.policy.routing.filters import (
    FreeSlot,
    Healthy,
    HealthyParams,
    NotEjected,
    NotEjectedParams,
    Serves,
)
from gateway.policy.routing.plugin import Filter
from gateway.policy.routing.router import Router
from gateway.policy.routing.snapshot import Replica, RequestFeatures

from ._util import DOWN, SUSPECT, names, rep, req


@pytest.mark.parametrize(
    ("flt", "request_", "replicas", "kept"),
    [
        pytest.param(
            Serves(),
            req("x"),
            [rep("a", models=("x",)), rep("b", models=("y",)), rep("c", models=("y", "x"))],
            ["a", "c"],
            id="serves model",
        ),
        pytest.param(
            Serves(),
            req("x", lora="sql"),
            [rep("a", models=("x",)), rep("b", models=("x",), loras=("sql",))],
            ["b"],
            id="serves adapter",
        ),
        pytest.param(
            Serves(),
            req("y", lora="sql"),
            [rep("b", models=("x",), loras=("sql",))],
            [],
            id="adapter of another model",
        ),
        pytest.param(Serves(), req("z"), [rep("a")], [], id="nobody serves"),
        pytest.param(
            Healthy(HealthyParams()),
            req(),
            [rep("a", whole=False), rep("b", ready=False), rep("c", health=DOWN), rep("d")],
            ["d"],
            id="healthy: whole, ready, not down",
        ),
        pytest.param(
            Healthy(HealthyParams()),
            req(),
            [rep("a", health=SUSPECT), rep("b"), rep("c", health=SUSPECT)],
            ["b"],
            id="healthy: suspect avoided while an up one is left",
        ),
        pytest.param(
            Healthy(HealthyParams()),
            req(),
            [rep("a", health=SUSPECT), rep("b", health=DOWN), rep("c", health=SUSPECT)],
            ["a", "c"],
            id="healthy: suspect kept when no up one is",
        ),
        pytest.param(
            Healthy(HealthyParams(prefer_up=False)),
            req(),
            [rep("a", health=SUSPECT), rep("b")],
            ["a", "b"],
            id="healthy: prefer_up off",
        ),
        pytest.param(
            FreeSlot(),
            req(),
            [
                rep("a", running=8),
                rep("b", running=7),
                rep("c", inflight=8, running=2),
                rep("d", running=6, waiting=2),
            ],
            ["b"],
            id="free slot: running, ours in flight, waiting",
        ),
        pytest.param(
            FreeSlot(),
            req(),
            [rep("a", running=8), rep("b", running=9, waiting=3)],
            ["a", "b"],
            id="free slot: none free keeps all",
        ),
        pytest.param(
            NotEjected(NotEjectedParams(), None), req(), [rep("a")], ["a"], id="no detector"
        ),
    ],
)
def test_filter(
    flt: Filter, request_: RequestFeatures, replicas: list[Replica], kept: list[str]
) -> None:
    assert names(flt.filter(request_, replicas, 0.0)) == kept


def test_filter_returns_its_input_when_all_pass() -> None:
    replicas = [rep("a"), rep("b")]
    for flt in (Serves(), Healthy(HealthyParams()), FreeSlot()):
        assert flt.filter(req(), replicas, 0.0) is replicas


def _ejected(*ejected: str, panic_below: float = 50.0) -> OutlierDetector:
    d = OutlierDetector(
        EjectionSettings(consecutive_failures=1, healthy_panic_threshold=panic_below)
    )
    for name in ejected:
        # Each in a pool of its own (the cap is the detector's business, not the filter's):
        # here the replicas may be ejected together, as they are once others went DOWN.
        assert d.failure(name, 0.0, pool={name, f"{name}-peer"}) is not None
    return d


ABCD = ["a", "b", "c", "d"]


@pytest.mark.parametrize(
    ("ejected", "now", "keep_all", "panic_below", "kept"),
    [
        ((), 1.0, True, 50.0, ABCD),
        (("b",), 1.0, True, 50.0, ["a", "c", "d"]),
        (("b",), 30.0, True, 50.0, ABCD),  # the ejection ends at its time
        (("a", "b"), 1.0, True, 50.0, ["c", "d"]),  # 50% left is not below 50%
        (("a", "b", "c"), 1.0, True, 50.0, ABCD),  # 25% left: panic, keep all
        (("a", "b", "c"), 1.0, True, 0.0, ["d"]),  # no panic threshold
        (("a", "b", "c"), 1.0, True, 80.0, ABCD),
        (("a",), 1.0, True, 80.0, ABCD),  # 75% left is under an 80% threshold
        (("a", "b", "c", "d"), 1.0, True, 0.0, ABCD),  # all ejected: keep all
        (("a", "b", "c", "d"), 1.0, False, 0.0, []),
        (("a", "b", "c", "d"), 1.0, False, 50.0, ABCD),  # the panic threshold keeps them
    ],
)
def test_not_ejected(
    ejected: tuple[str, ...], now: float, keep_all: bool, panic_below: float, kept: list[str]
) -> None:
    flt = NotEjected(
        NotEjectedParams(keep_all_if_none=keep_all), _ejected(*ejected, panic_below=panic_below)
    )
    assert names(flt.filter(req(), [rep(n) for n in ABCD], now)) == kept


def test_panic_counts_the_live_replicas() -> None:
    """A DOWN replica is no ejection and does not count; a SUSPECT one does (the filter runs
    before `healthy`, which would set it aside)."""
    flt = NotEjected(NotEjectedParams(), _ejected("a", "b"))
    down, suspect = rep("c", health=DOWN), rep("c", health=SUSPECT)
    assert names(flt.filter(req(), [rep("a"), rep("b"), down, rep("d")], 1.0)) == ABCD  # 1 of 3
    assert names(flt.filter(req(), [rep("a"), rep("b"), suspect, rep("d")], 1.0)) == ["c", "d"]
    assert names(flt.filter(req(), [rep("a"), rep("b"), rep("c", whole=False)], 1.0)) == [
        "a",
        "b",
        "c",
    ]  # no live replica un-ejected: keep all
    one = NotEjected(NotEjectedParams(), _ejected("a"))
    assert names(one.filter(req(), [rep("a"), rep("b"), down], 1.0)) == ["b", "c"]  # 1 of 2


def test_the_default_profile_avoids_ejected_and_stalled_replicas_without_panic() -> None:
    """Two of four ejected, a third SUSPECT (its engine stalled, kept by the cap): 50% of the
    live replicas are un-ejected, no panic, and the UP one takes the request."""
    router = Router(RoutingSettings(seed=1), _ejected("a", "b"))
    pool = [rep("a"), rep("b"), rep("c", health=SUSPECT), rep("d")]
    for _ in range(20):
        chosen = router.profile.route(RequestFeatures(model="m"), pool, 1.0)
        assert chosen is not None and chosen.name == "d"
