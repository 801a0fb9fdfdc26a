from __future__ import annotations

from dataclasses import dataclass

import pytest

from gateway.config.tenants import PreemptionConfig, SchedulingConfig
from gateway.policy.preemption import Preemption

NOW = 1000.0


@dataclass
class Run:
    name: str
    priority: int
    started_at: float
    preemptions: int = 0


def policy(**kw: object) -> Preemption:
    return Preemption(SchedulingConfig(preemption=PreemptionConfig(**kw)))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("waiting", "running", "victim"),
    [
        (10, [Run("a", 0, 1), Run("b", 0, 5), Run("c", -5, 2)], "c"),  # lowest class
        (10, [Run("a", 0, 1), Run("b", 0, 5), Run("c", 0, 3)], "b"),  # then started last
        (1, [Run("a", 0, 1), Run("b", 1, 900)], "a"),  # strictly below
        (0, [Run("a", 0, 1), Run("b", 5, 1)], None),  # nothing below
        (-5, [Run("a", -5, 1)], None),
        (10, [], None),
        # limits: preempted too often / restarted too recently
        (10, [Run("a", 0, 1, preemptions=3), Run("b", 5, 1)], "b"),
        (10, [Run("a", 0, NOW - 0.5, preemptions=1), Run("b", 5, 1)], "b"),
        (10, [Run("a", 0, NOW - 1.0, preemptions=1), Run("b", 5, 1)], "a"),
        (10, [Run("a", 0, NOW - 0.1, preemptions=0)], "a"),  # never preempted: no min run
        (10, [Run("a", 0, NOW - 0.5, preemptions=2), Run("b", 0, NOW - 0.5, preemptions=3)], None),
    ],
)
def test_victim(waiting: int, running: list[Run], victim: str | None) -> None:
    v = policy(max_per_request=3, min_run_s=1.0).choose(waiting, running, NOW)
    assert (v.request.name if v else None) == victim
    if v is not None:
        assert v.resume


def test_disabled() -> None:
    assert policy(enabled=False).choose(10, [Run("a", -5, 1)], NOW) is None


@pytest.mark.parametrize(
    ("reject_sheddable", "running", "victim", "resume"),
    [
        (False, [Run("s", -5, 1)], "s", True),
        (True, [Run("s", -5, 1)], "s", False),
        (True, [Run("n", 0, 1)], "n", True),  # class 0 is not sheddable
        # rejected victims are never resumed: the resume limits do not apply
        (True, [Run("s", -5, NOW, preemptions=9)], "s", False),
        (False, [Run("s", -5, NOW, preemptions=9)], None, None),
    ],
)
def test_sheddable(
    reject_sheddable: bool, running: list[Run], victim: str | None, resume: bool | None
) -> None:
    p = Preemption(
        SchedulingConfig(
            sheddable_below=0, preemption=PreemptionConfig(reject_sheddable=reject_sheddable)
        )
    )
    v = p.choose(10, running, NOW)
    assert (v.request.name if v else None, v.resume if v else None) == (victim, resume)
