"""A stalled replica is ejected through the pool's cap: the supervisor counts the live replicas
of every model it serves, never ejects the last one, and says whether it ejected (the fleet then
moves its requests)."""

from __future__ import annotations

import pytest

from gateway.config.routing import HealthSettings
from gateway.config.schema import LinkSettings
from gateway.policy.routing.replicas import assemble
from gateway.policy.routing.snapshot import EndpointSnapshot
from gateway.runtime.fleet import Fleet
from gateway.runtime.supervisor import Supervisor
from tests.unit.policy.routing._util import DOWN, snap

NOW = 100.0


def supervisor(snaps: list[EndpointSnapshot]) -> tuple[Supervisor, list[str]]:
    fleet = Fleet([], LinkSettings())
    fleet.assembly = assemble(snaps)
    s = Supervisor(fleet, health=HealthSettings(), clock=lambda: NOW)
    ejected: list[str] = []
    s.on_ejected = ejected.append
    return s, ejected


@pytest.mark.parametrize(
    ("replicas", "stalled", "ejected"),
    [
        (1, ["r0"], []),  # the only replica: never
        (2, ["r0", "r1"], ["r0"]),
        (3, ["r0", "r1", "r2"], ["r0"]),
        (4, ["r0", "r1", "r2"], ["r0", "r1"]),
        (4, ["r0", "r0", "r0"], ["r0"]),  # offered again while ejected: nothing new
    ],
)
def test_stalls_eject_within_the_cap(replicas: int, stalled: list[str], ejected: list[str]) -> None:
    s, seen = supervisor([snap(f"r{i}") for i in range(replicas)])
    got = [name for name in stalled if s.stalled(name)]
    assert got == ejected == seen


def test_a_down_replica_is_not_in_the_pool() -> None:
    s, _ = supervisor([snap("a"), snap("b"), snap("c", health=DOWN)])
    assert s.stalled("a")
    assert not s.stalled("b")  # 1 of the 2 live ones is out already


def test_every_model_of_the_replica_counts() -> None:
    s, _ = supervisor(
        [snap("a", models=("x", "y")), snap("b", models=("x",)), snap("c", models=("x", "y"))]
    )
    assert s.stalled("a")
    assert not s.stalled("c")  # the last un-ejected replica of y
    assert not s.stalled("b")  # x: 1 of 3 out, 1 allowed
