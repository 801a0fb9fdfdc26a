from __future__ import annotations

import pytest

from gateway.config.routing import EjectionSettings
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


def _ejected(*ejected: str) -> OutlierDetector:
    d = OutlierDetector(EjectionSettings(consecutive_failures=1, max_ejection_percent=100))
    for name in ejected:
        d.failure(name, 0.0, pool={"a", "b", "c"})
    return d


@pytest.mark.parametrize(
    ("ejected", "now", "keep_all", "kept"),
    [
        ((), 1.0, True, ["a", "b", "c"]),
        (("b",), 1.0, True, ["a", "c"]),
        (("b",), 30.0, True, ["a", "b", "c"]),  # the ejection ends at its time
        (("a", "b", "c"), 1.0, True, ["a", "b", "c"]),  # all ejected: panic, keep all
        (("a", "b", "c"), 1.0, False, []),
    ],
)
def test_not_ejected(ejected: tuple[str, ...], now: float, keep_all: bool, kept: list[str]) -> None:
    flt = NotEjected(NotEjectedParams(keep_all_if_none=keep_all), _ejected(*ejected))
    assert names(flt.filter(req(), [rep("a"), rep("b"), rep("c")], now)) == kept
