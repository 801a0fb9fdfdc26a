from __future__ import annotations

import random

import pytest

from gateway.policy.linear import OnlineLinear


def test_recovers_a_linear_law() -> None:
    m = OnlineLinear(3, window=64)
    rng = random.Random(0)
    for _ in range(200):
        a, b = rng.uniform(0, 16), rng.uniform(0, 4)
        m.observe((1.0, a, b), 0.02 + 0.001 * a + 0.12 * b)
    w = m.weights()
    assert w == pytest.approx([0.02, 0.001, 0.12], abs=1e-6)
    assert m.predict((1.0, 8.0, 2.0)) == pytest.approx(0.02 + 0.008 + 0.24)


def test_not_ready_before_twice_the_features() -> None:
    m = OnlineLinear(2, window=8)
    for i in range(3):
        m.observe((1.0, float(i)), 1.0)
        assert not m.ready and m.predict((1.0, 0.0)) is None
    m.observe((1.0, 3.0), 1.0)
    assert m.ready and m.predict((1.0, 0.0)) == pytest.approx(1.0, rel=1e-4)


def test_a_constant_feature_stays_stable() -> None:
    """A batch that is always full: the fit explains the level, and predicts it."""
    m = OnlineLinear(2, window=32)
    for _ in range(100):
        m.observe((1.0, 16.0), 0.5)
    assert m.predict((1.0, 16.0)) == pytest.approx(0.5, rel=1e-3)


def test_the_window_forgets_an_old_regime() -> None:
    m = OnlineLinear(2, window=16)
    for i in range(40):
        m.observe((1.0, float(i % 4)), 1.0 + i % 4)
    for i in range(16):
        m.observe((1.0, float(i % 4)), 3.0 * (i % 4))
    assert m.predict((1.0, 2.0)) == pytest.approx(6.0, rel=1e-6)
    assert len(m) == 16


def test_never_below_zero_and_nan_is_not_learned() -> None:
    m = OnlineLinear(2, window=16)
    for i in range(8):
        m.observe((1.0, float(i)), 1.0 - 0.2 * i)
    m.observe((1.0, 1.0), float("nan"))
    assert len(m) == 8
    assert m.predict((1.0, 100.0)) == 0.0


def test_rebuilt_sums_match_after_many_windows() -> None:
    m = OnlineLinear(3, window=10)
    rng = random.Random(1)
    for _ in range(1000):
        a, b = rng.uniform(0, 100), rng.uniform(0, 1000)
        m.observe((1.0, a, b), 5.0 + 0.5 * a + 0.01 * b)
    assert m.weights() == pytest.approx([5.0, 0.5, 0.01], rel=1e-4)


def test_misuse() -> None:
    with pytest.raises(ValueError, match="features"):
        OnlineLinear(3, window=2)
    with pytest.raises(ValueError, match="expected 2 features"):
        OnlineLinear(2).observe((1.0,), 1.0)
