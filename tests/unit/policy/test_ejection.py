from __future__ import annotations

import pytest

from gateway.config.routing import EjectionSettings
from gateway.policy.ejection import OutlierDetector, ejectable, panic

POOL = frozenset({"a", "b", "c", "d"})


def _detector(**kw: object) -> OutlierDetector:
    base: dict[str, object] = {"consecutive_failures": 3, "base_ejection_time_s": 30.0}
    return OutlierDetector(EjectionSettings(**(base | kw)))  # type: ignore[arg-type]


def _fail(d: OutlierDetector, name: str, now: float, times: int = 3) -> float | None:
    out = None
    for _ in range(times):
        out = d.failure(name, now, POOL)
    return out


@pytest.mark.parametrize(
    ("outcomes", "ejected"),
    [
        ("FF", False),
        ("FFF", True),
        ("FFSFF", False),  # a success resets the count
        ("FFSFFF", True),
        ("SSSS", False),
    ],
)
def test_consecutive_failures(outcomes: str, ejected: bool) -> None:
    d = _detector()
    for o in outcomes:
        if o == "F":
            d.failure("a", 1.0, POOL)
        else:
            d.success("a", 1.0)
    assert d.is_ejected("a", 1.0) is ejected


def test_ejection_ends_at_its_time() -> None:
    d = _detector()
    assert _fail(d, "a", 10.0) == 40.0
    assert d.any_ejected(39.9) and d.is_ejected("a", 39.9)
    assert d.ejected_until("a", 20.0) == 40.0
    assert not d.is_ejected("a", 40.0) and d.ejected_until("a", 40.0) is None
    assert not d.any_ejected(40.0)


def test_failures_while_ejected_are_ignored() -> None:
    d = _detector()
    _fail(d, "a", 0.0)
    assert _fail(d, "a", 5.0, times=10) is None
    assert d.ejected_until("a", 5.0) == 30.0  # not extended
    # After it ends, the count starts from zero.
    assert _fail(d, "a", 31.0, times=2) is None


@pytest.mark.parametrize(
    ("max_s", "durations"),
    [
        (300.0, [30.0, 60.0, 90.0, 120.0, 150.0]),
        (70.0, [30.0, 60.0, 70.0, 70.0, 70.0]),  # capped
    ],
)
def test_ejection_time_grows_with_each_ejection(max_s: float, durations: list[float]) -> None:
    d = _detector(max_ejection_time_s=max_s, decay_interval_s=1000.0)
    now, got = 0.0, []
    for _ in durations:
        until = _fail(d, "a", now)
        assert until is not None
        got.append(until - now)
        now = until  # fails again the moment it is back
    assert got == durations


def test_multiplier_decays_while_healthy() -> None:
    """Envoy's test: 10, 20, 30 s; two clean intervals bring it down to 20 s; a long clean
    spell back to the base."""
    d = _detector(base_ejection_time_s=10.0, decay_interval_s=10.0)
    assert _fail(d, "a", 0.0) == 10.0
    assert _fail(d, "a", 10.0) == 30.0
    assert _fail(d, "a", 30.0) == 60.0
    assert _fail(d, "a", 80.0) == 80.0 + 20.0  # out at 60, two intervals clean: 3 - 2 + 1
    assert _fail(d, "a", 10_000.0) == 10_010.0


def test_multiplier_is_bounded_like_envoys() -> None:
    d = _detector(base_ejection_time_s=10.0, max_ejection_time_s=30.0, decay_interval_s=1e9)
    now = 0.0
    for _ in range(50):
        until = _fail(d, "a", now)
        assert until is not None
        now = until
    # Envoy stops raising the multiplier once base x multiplier >= max + base: one clean
    # interval after a long failing streak already shortens the ejection.
    d2 = _detector(base_ejection_time_s=10.0, max_ejection_time_s=30.0, decay_interval_s=10.0)
    now = 0.0
    for _ in range(50):
        until = _fail(d2, "a", now)
        assert until is not None
        now = until
    assert _fail(d2, "a", now + 20.0) == now + 20.0 + 30.0  # multiplier 4 - 2 + 1 = 3


@pytest.mark.parametrize(
    ("percent", "always_one", "pool_size", "allowed"),
    [
        (50.0, True, 4, 2),
        (50.0, False, 4, 2),
        (10.0, True, 4, 1),  # at least one
        (10.0, False, 4, 0),  # Envoy >= 1.31 without always_eject_one_host
        (10.0, False, 10, 1),
        (25.0, False, 10, 2),
        (100.0, False, 3, 2),  # never the last one
        (0.0, True, 4, 1),
        (0.0, False, 4, 0),
        (50.0, True, 1, 0),  # the only replica: never
        (50.0, True, 2, 1),
        (50.0, True, 3, 1),
        (50.0, True, 4, 2),
    ],
)
def test_percent_cap(percent: float, always_one: bool, pool_size: int, allowed: int) -> None:
    d = _detector(max_ejection_percent=percent, always_eject_one=always_one)
    pool = frozenset(f"r{i}" for i in range(pool_size))
    for name in sorted(pool):
        for _ in range(3):
            d.failure(name, 1.0, pool)
    assert sum(d.is_ejected(n, 1.0) for n in pool) == allowed


@pytest.mark.parametrize(
    ("size", "percent", "always_one", "allowed"),
    [
        (0, 50.0, True, 0),
        (1, 50.0, True, 0),  # the only replica: never
        (1, 100.0, True, 0),
        (2, 50.0, True, 1),
        (2, 50.0, False, 1),
        (3, 50.0, True, 1),
        (3, 50.0, False, 1),
        (4, 50.0, False, 2),
        (5, 50.0, False, 2),
        (4, 100.0, False, 3),  # never the last one
        (3, 10.0, True, 1),  # always one ...
        (3, 10.0, False, 0),
        (2, 0.0, True, 1),  # ... when none is, and not the last
        (10, 33.0, False, 3),
        (3, 100.0 / 3, False, 1),  # 33.33...% of 3 is one
    ],
)
def test_ejectable(size: int, percent: float, always_one: bool, allowed: int) -> None:
    assert ejectable(size, percent, always_one) == allowed


@pytest.mark.parametrize(
    ("healthy", "total", "threshold", "panics"),
    [
        (4, 4, 50.0, False),
        (2, 4, 50.0, False),  # 50% is not below 50%
        (1, 4, 50.0, True),
        (0, 1, 50.0, True),
        (0, 4, 0.0, False),  # 0: never
        (3, 4, 80.0, True),
        (4, 4, 100.0, False),
        (0, 0, 50.0, False),  # nothing to route to: nothing to panic about
    ],
)
def test_panic(healthy: int, total: int, threshold: float, panics: bool) -> None:
    assert panic(healthy, total, threshold) is panics


def test_a_down_replica_is_no_ejection() -> None:
    """The pool is the live replicas: one that went DOWN since it was ejected neither counts
    toward the cap nor is counted against the others."""
    d = _detector()
    assert d.eject("a", 0.0, POOL) is not None
    assert d.eject("b", 0.0, POOL) is not None
    assert d.eject("c", 0.0, POOL) is None  # 2 of 4
    live = POOL - {"a"}  # a went DOWN
    assert d.eject("c", 0.0, live) is None  # 1 ejected of 3 live: b is the one allowed
    live = POOL - {"a", "b"}
    assert d.eject("c", 0.0, live) is not None  # 0 of 2 live ejected: one may go
    assert d.eject("d", 0.0, live) is None  # the last live one: never


def test_the_only_live_replica_is_never_ejected() -> None:
    d = _detector()
    alone = frozenset({"a"})
    assert all(d.failure("a", 0.0, alone) is None for _ in range(50))  # every run refused
    assert d.eject("a", 0.0, alone) is None
    assert d.eject("a", 0.0, frozenset()) is None  # in no live pool: alone
    assert not d.any_ejected(0.0)


def test_eject_needs_every_pool_of_the_replica() -> None:
    d = _detector()
    big, small = frozenset({"a", "b", "c", "d"}), frozenset({"a", "x"})
    assert d.eject("x", 0.0, small) is not None
    assert d.eject("a", 0.0, big, small) is None  # x already out of small
    assert d.eject("a", 0.0, big) is not None  # (as one model's replica alone it may go)


def test_cap_refusal_needs_a_fresh_run_and_frees_up() -> None:
    d = _detector(max_ejection_percent=25.0, always_eject_one=False)
    assert _fail(d, "a", 0.0) is not None
    assert _fail(d, "b", 1.0) is None  # 2 of 4 would be 50%
    assert d.failure("b", 31.0, POOL) is None  # the count was reset by the detection
    assert _fail(d, "b", 31.0, times=2) == 61.0  # a is back: b may go


def test_cap_counts_only_the_pool() -> None:
    d = _detector(max_ejection_percent=50.0, always_eject_one=False)
    other = frozenset({"x", "y"})
    assert _fail(d, "a", 0.0) is not None
    for _ in range(3):
        d.failure("x", 0.0, other)
    assert d.is_ejected("x", 0.0)  # "a" is not in x's pool


def test_disabled_never_ejects() -> None:
    d = _detector(enabled=False)
    assert _fail(d, "a", 0.0, times=50) is None
    assert not d.any_ejected(0.0)


def test_forget() -> None:
    d = _detector()
    _fail(d, "a", 0.0)
    d.forget("a")
    assert not d.is_ejected("a", 1.0) and not d.any_ejected(1.0)


def test_eject_is_a_detection_at_once() -> None:
    d = _detector()
    d.failure("a", 0.0, POOL)
    assert d.eject("a", 1.0, POOL) == 31.0
    assert d.is_ejected("a", 30.9) and not d.is_ejected("a", 31.0)
    assert d.eject("a", 5.0, POOL) is None  # already ejected: not extended
    assert d.ejected_until("a", 5.0) == 31.0
    assert _fail(d, "a", 31.0, times=2) is None  # the detection reset the count
    assert d.eject("a", 32.0, POOL) == 92.0  # the next one lasts longer, as for failures


def test_eject_respects_the_cap_and_the_switch() -> None:
    d = _detector(max_ejection_percent=25.0, always_eject_one=False)
    assert d.eject("a", 0.0, POOL) is not None
    assert d.eject("b", 0.0, POOL) is None  # 2 of 4 would be 50%
    off = _detector(enabled=False)
    assert off.eject("a", 0.0, POOL) is None and not off.any_ejected(0.0)
