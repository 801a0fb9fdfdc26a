from __future__ import annotations

import random
from collections import Counter

import pytest

from gateway.policy.routing.pickers import MaxScore, Random


@pytest.mark.parametrize(
    ("scores", "allowed"),
    [
        ([0.5], {0}),
        ([0.1, 0.9, 0.3], {1}),
        ([0.9, 0.1, 0.9], {0, 2}),
        ([0.0, 0.0, 0.0, 0.0], {0, 1, 2, 3}),
    ],
)
def test_max_score(scores: list[float], allowed: set[int]) -> None:
    picker = MaxScore(random.Random(7))
    picks = Counter(picker.pick(scores) for _ in range(400))
    assert set(picks) == allowed  # every tie gets picked, nothing else does


def test_max_score_unique_best_draws_nothing() -> None:
    rng = random.Random(1)
    state = rng.getstate()
    assert MaxScore(rng).pick([0.2, 0.8]) == 1
    assert rng.getstate() == state


def test_max_score_ties_follow_the_injected_rng() -> None:
    one, two = MaxScore(random.Random(3)), MaxScore(random.Random(3))
    a = [one.pick([1.0, 1.0, 1.0]) for _ in range(20)]
    assert a == [two.pick([1.0, 1.0, 1.0]) for _ in range(20)]
    assert len(set(a)) > 1


def test_random_ignores_scores() -> None:
    picker = Random(random.Random(5))
    picks = Counter(picker.pick([1.0, 0.0, 0.0]) for _ in range(600))
    assert set(picks) == {0, 1, 2}
