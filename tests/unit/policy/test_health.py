from __future__ import annotations

import random

import pytest

from gateway.config.routing import HealthSettings
from gateway.policy.health import (
    FALLBACK_INTERVAL_S,
    Health,
    HeartbeatMonitor,
    heartbeat_interval_s,
    reconnect_delay_s,
)

UP, SUSPECT, DOWN = Health.UP, Health.SUSPECT, Health.DOWN
SETTINGS = HealthSettings(suspect_after_intervals=2, down_after_intervals=5)

# Events: ("beat", t) a load report at t; ("lost", t) the link closed; ("at", t, state) a check.
Event = tuple[object, ...]


@pytest.mark.parametrize(
    "events",
    [
        pytest.param([("at", 0.0, DOWN), ("at", 100.0, DOWN)], id="down until the first beat"),
        pytest.param(
            [
                ("beat", 0.0),
                ("at", 0.0, UP),
                ("at", 1.99, UP),
                ("at", 2.0, SUSPECT),
                ("at", 4.99, SUSPECT),
                ("at", 5.0, DOWN),
                ("at", 50.0, DOWN),
            ],
            id="missed heartbeats: up, suspect, down",
        ),
        pytest.param(
            [("beat", 0.0), ("beat", 1.5), ("beat", 3.0), ("at", 4.9, UP), ("at", 5.0, SUSPECT)],
            id="steady beats keep it up",
        ),
        pytest.param(
            [("beat", 0.0), ("at", 3.0, SUSPECT), ("beat", 3.5), ("at", 3.5, UP)],
            id="a beat brings a suspect back",
        ),
        pytest.param(
            [("beat", 0.0), ("at", 9.0, DOWN), ("beat", 9.5), ("at", 9.5, UP)],
            id="a beat brings a down one back",
        ),
        pytest.param(
            [("beat", 0.0), ("lost", 0.5), ("at", 0.5, DOWN), ("beat", 0.7), ("at", 0.7, UP)],
            id="link closed: down at once, back on the next beat",
        ),
        pytest.param(
            [
                ("beat", 0.0),
                ("active", 4.0),
                ("at", 5.0, SUSPECT),
                ("active", 8.5),
                ("at", 13.4, SUSPECT),
                ("at", 13.5, DOWN),
            ],
            id="deltas without heartbeats: suspect, down only once the link is silent",
        ),
        pytest.param(
            [("beat", 0.0), ("active", 4.0), ("lost", 4.5), ("at", 4.5, DOWN)],
            id="link closed while active: down",
        ),
        pytest.param(
            [("beat", 0.0), ("forgive", 3.0), ("at", 4.9, UP), ("at", 5.0, SUSPECT)],
            id="a stalled gateway forgives the silence it could not hear",
        ),
    ],
)
def test_transitions(events: list[Event]) -> None:
    m = HeartbeatMonitor(SETTINGS, interval_s=1.0)
    for e in events:
        if e[0] == "beat":
            m.beat(float(e[1]))  # type: ignore[arg-type]
        elif e[0] == "forgive":
            m.forgive(float(e[1]))  # type: ignore[arg-type]
        elif e[0] == "active":
            m.activity(float(e[1]))  # type: ignore[arg-type]
        elif e[0] == "lost":
            m.lost()
        else:
            assert m.state(float(e[1])) is e[2], e  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("last_beat", "now", "expected"),
    [(None, 0.0, None), (10.0, 10.5, 12.0), (10.0, 12.0, 15.0), (10.0, 15.0, None)],
)
def test_next_change(last_beat: float | None, now: float, expected: float | None) -> None:
    m = HeartbeatMonitor(SETTINGS, interval_s=1.0)
    if last_beat is not None:
        m.beat(last_beat)
    assert m.next_change(now) == expected
    if expected is not None:  # the state does change at that time
        assert m.state(expected) is not m.state(now)


def test_configure_changes_the_interval() -> None:
    m = HeartbeatMonitor(SETTINGS, interval_s=1.0)
    m.beat(0.0)
    m.configure(SETTINGS, interval_s=0.5)
    assert m.state(1.0) is SUSPECT and m.state(2.5) is DOWN


@pytest.mark.parametrize(
    ("configured", "announced", "expected"),
    [(None, 0.5, 0.5), (2.0, 0.5, 2.0), (None, 0.0, FALLBACK_INTERVAL_S)],
)
def test_heartbeat_interval(configured: float | None, announced: float, expected: float) -> None:
    settings = HealthSettings(heartbeat_interval_s=configured)
    assert heartbeat_interval_s(settings, announced) == expected


@pytest.mark.parametrize(
    ("attempt", "low", "high"),
    [
        (0, 0.05, 0.1),
        (1, 0.1, 0.2),
        (3, 0.4, 0.8),
        (6, 2.5, 5.0),  # 6.4 capped at 5
        (10_000, 2.5, 5.0),  # no overflow
        (-1, 0.05, 0.1),
    ],
)
def test_reconnect_delay(attempt: int, low: float, high: float) -> None:
    rng = random.Random(attempt)
    delays = [reconnect_delay_s(attempt, rng, base_s=0.1, cap_s=5.0) for _ in range(200)]
    assert all(low <= d <= high for d in delays)
    assert len(set(delays)) > 100  # jittered


def test_reconnect_delay_is_deterministic_with_a_seed() -> None:
    a = [reconnect_delay_s(i, random.Random(9), base_s=0.1, cap_s=5.0) for i in range(8)]
    b = [reconnect_delay_s(i, random.Random(9), base_s=0.1, cap_s=5.0) for i in range(8)]
    assert a == b
