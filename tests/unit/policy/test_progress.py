from __future__ import annotations

import pytest

from gateway.policy.progress import STEPS_SEEN, StallDetector

TIMEOUT_S = 10.0

# Steps, each one of:
#   ("obs", now, steps, work, output_at, stalled)  observe; `stalled` is the expected answer
#   ("forgive", seconds)                            the gateway itself was stalled that long
#   ("forget",)                                     the link closed
#   ("pause",)                                      its heartbeats are late (not UP)
Step = tuple[object, ...]


def run(
    steps: list[Step],
    timeout_s: float | None = TIMEOUT_S,
    grace_s: float = 0.0,
    multiplier: float = 0.0,
) -> None:
    d = StallDetector(timeout_s, grace_s, multiplier)
    for i, step in enumerate(steps):
        match step:
            case ("obs", now, counter, work, output_at, expected):
                got = d.observe("a", now, counter, work, output_at)  # type: ignore[arg-type]
                assert got is expected, f"step {i}: {step}"
            case ("forgive", seconds):
                d.forgive(seconds)  # type: ignore[arg-type]
            case ("forget",):
                d.forget("a")
            case ("pause",):
                d.pause("a")
            case _:
                raise AssertionError(step)


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param(
            [("obs", 0.0, 5, 3, 0.0, False), ("obs", 9.9, 5, 3, 0.0, False)],
            id="work held, no progress, under the timeout",
        ),
        pytest.param(
            [("obs", 0.0, 5, 3, 0.0, False), ("obs", 10.0, 5, 3, 0.0, True)],
            id="work held, no progress for the timeout: stalled",
        ),
        pytest.param(
            [
                ("obs", 0.0, 5, 3, 0.0, False),
                ("obs", 8.0, 6, 3, 0.0, False),
                ("obs", 17.9, 6, 3, 0.0, False),
                ("obs", 18.0, 6, 3, 0.0, True),
            ],
            id="the counter moved: timed from then",
        ),
        pytest.param(
            [
                ("obs", 0.0, 5, 3, 1.0, False),
                ("obs", 9.0, 5, 3, 8.5, False),
                ("obs", 18.9, 5, 3, 8.5, False),
                ("obs", 19.0, 5, 3, 8.5, True),
            ],
            id="deltas arrived with the counter stale (no heartbeats): progress",
        ),
        pytest.param(
            [
                ("obs", 0.0, 5, 0, 0.0, False),
                ("obs", 100.0, 5, 0, 0.0, False),
                ("obs", 1000.0, 5, 0, 0.0, False),
            ],
            id="idle: never stalled",
        ),
        pytest.param(
            [
                ("obs", 0.0, 5, 0, 0.0, False),
                ("obs", 100.0, 5, 2, 0.0, False),
                ("obs", 109.9, 5, 2, 0.0, False),
                ("obs", 110.0, 5, 2, 0.0, True),
            ],
            id="timed from when work appeared, not from the last progress",
        ),
        pytest.param(
            [
                ("obs", 0.0, 5, 2, 0.0, False),
                ("obs", 10.0, 5, 2, 0.0, True),
                ("obs", 11.0, 5, 0, 0.0, False),
                ("obs", 12.0, 5, 1, 0.0, False),
                ("obs", 21.9, 5, 1, 0.0, False),
                ("obs", 22.0, 5, 1, 0.0, True),
            ],
            id="the work went away: the stall ends; new work is timed afresh",
        ),
        pytest.param(
            [
                ("obs", 0.0, 5, 2, 0.0, False),
                ("obs", 10.0, 5, 2, 0.0, True),
                ("obs", 10.5, 6, 2, 0.0, False),
                ("obs", 20.4, 6, 2, 0.0, False),
            ],
            id="progress resumed: not stalled any more",
        ),
        pytest.param(
            [
                ("obs", 0.0, 5, 2, 0.0, False),
                ("forgive", 4.0),
                ("obs", 13.9, 5, 2, 0.0, False),
                ("obs", 14.0, 5, 2, 0.0, True),
            ],
            id="the gateway's own stall is forgiven",
        ),
        pytest.param(
            [
                ("obs", 0.0, 5, 2, 0.0, False),
                ("forget",),
                ("obs", 10.0, 5, 2, 0.0, False),
                ("obs", 19.9, 5, 2, 0.0, False),
                ("obs", 20.0, 5, 2, 0.0, True),
            ],
            id="a new link is timed afresh",
        ),
        pytest.param(
            [
                ("obs", 0.0, None, 4, 0.0, False),
                ("obs", 1000.0, None, 4, 0.0, False),
            ],
            id="a sidecar that reports no progress is not judged",
        ),
        pytest.param(
            [
                ("obs", 0.0, 5, 2, 0.0, False),
                ("obs", 5.0, 3, 2, 0.0, False),
                ("obs", 14.9, 3, 2, 0.0, False),
                ("obs", 15.0, 3, 2, 0.0, True),
            ],
            id="a counter that went back (an engine restarted) is a change",
        ),
    ],
)
def test_stall(steps: list[Step]) -> None:
    run(steps)


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param(
            [
                ("obs", 0.0, 0, 0, 0.0, False),
                ("obs", 1.0, 0, 1, 0.0, False),
                ("obs", 20.0, 0, 1, 0.0, False),  # a long first step: not held against it
                ("obs", 40.9, 0, 1, 0.0, False),
                ("obs", 41.0, 0, 1, 0.0, True),  # hung in it: the grace and the timeout past
            ],
            id="a fresh engine's first step: judged only after the grace plus the timeout",
        ),
        pytest.param(
            [
                ("obs", 0.0, 0, 1, 0.0, False),
                ("obs", 15.0, 1, 1, 0.0, False),  # the first step took 15 s
                ("obs", 44.9, 1, 1, 0.0, False),  # within the grace: timed by it (30 s)
                ("obs", 45.0, 1, 1, 0.0, True),
            ],
            id="after its first step, the start-up grace",
        ),
        pytest.param(
            [
                ("obs", 0.0, 0, 1, 0.0, False),
                ("obs", 15.0, 1, 1, 0.0, False),
                ("obs", 44.0, 2, 1, 0.0, False),  # a slow second step (29 s)
                ("obs", 50.0, 3, 1, 0.0, False),  # grace over: timed by its own steps now
                ("obs", 78.9, 3, 1, 0.0, False),  # x1 the longest step (29 s) seen lately
                ("obs", 79.0, 3, 1, 0.0, True),
            ],
            id="the grace ends; the timeout scales with its steps",
        ),
        pytest.param(
            [
                ("obs", 0.0, 0, 1, 0.0, False),
                ("obs", 15.0, 0, 1, 9.0, False),  # deltas before the counter: its first step
                ("obs", 44.9, 0, 1, 9.0, False),
                ("obs", 45.0, 0, 1, 9.0, True),
            ],
            id="output is a first step too",
        ),
        pytest.param(
            [
                ("obs", 0.0, 7, 1, 0.0, False),
                ("obs", 9.9, 7, 1, 0.0, False),
                ("obs", 10.0, 7, 1, 0.0, True),
            ],
            id="first seen past its first step: no grace",
        ),
        pytest.param(
            [
                ("obs", 0.0, 0, 1, 0.0, False),
                ("forgive", 5.0),
                ("obs", 15.0, 1, 1, 0.0, False),
                ("forgive", 5.0),
                ("obs", 49.9, 1, 1, 0.0, False),  # the grace moved with the forgiven time
                ("obs", 50.0, 1, 1, 0.0, True),
            ],
            id="forgiven time extends the grace",
        ),
        pytest.param(
            [
                ("obs", 0.0, 0, 1, 0.0, False),
                ("obs", 15.0, 1, 1, 0.0, False),
                ("pause",),  # heartbeats late: not timed, what was seen is kept
                ("obs", 40.0, 1, 1, 0.0, False),  # timed afresh from here, grace still on
                ("obs", 44.9, 1, 1, 0.0, False),
                ("obs", 70.0, 1, 1, 0.0, True),  # grace over, 30 s without progress
            ],
            id="paused: timed afresh, the engine remembered",
        ),
        pytest.param(
            [
                ("obs", 0.0, 50, 1, 0.0, False),
                ("obs", 5.0, 0, 1, 0.0, False),  # the counter went back: a new engine
                ("obs", 44.9, 0, 1, 0.0, False),  # ... in its first step
                ("obs", 45.0, 0, 1, 0.0, True),
            ],
            id="a restarted engine is fresh again",
        ),
    ],
)
def test_start_up(steps: list[Step]) -> None:
    run(steps, grace_s=30.0, multiplier=1.0)


@pytest.mark.parametrize(
    ("waits", "multiplier", "timeout"),
    [
        ([], 4.0, 10.0),  # no step seen yet: the configured timeout
        ([0.5, 0.5, 0.5], 4.0, 10.0),  # fast steps: the configured timeout is the floor
        ([0.5, 3.0, 0.5], 4.0, 12.0),  # the longest recent step, times the multiplier
        ([3.0] + [0.5] * STEPS_SEEN, 4.0, 10.0),  # a slow step long ago is forgotten
        ([6.0], 0.0, 10.0),  # multiplier 0: no scaling
    ],
)
def test_the_timeout_scales_with_the_steps_seen(
    waits: list[float], multiplier: float, timeout: float
) -> None:
    d = StallDetector(TIMEOUT_S, 0.0, multiplier)
    now, steps = 0.0, 5
    d.observe("a", now, steps, 1, 0.0)
    for w in waits:
        now, steps = now + w, steps + 1
        assert not d.observe("a", now, steps, 1, 0.0)
    assert d.timeout_for("a", now) == timeout
    assert not d.observe("a", now + timeout - 0.01, steps, 1, 0.0)
    assert d.observe("a", now + timeout, steps, 1, 0.0)


def test_reconfigure_keeps_what_was_seen() -> None:
    d = StallDetector(TIMEOUT_S)
    d.observe("a", 0.0, 0, 1, 0.0)
    d.configure(TIMEOUT_S, 30.0, 4.0)
    assert d.timeout_for("a", 0.0) == 30.0 + TIMEOUT_S  # still in its first step
    assert not d.observe("a", 1.0, 1, 1, 0.0)
    assert d.timeout_for("a", 1.0) == 30.0  # the grace applies to it
    d.configure(None, 30.0, 4.0)
    assert not d.observe("a", 100.0, 1, 1, 0.0)


def test_without_a_timeout_nothing_stalls() -> None:
    run([("obs", 0.0, 5, 3, 0.0, False), ("obs", 1e9, 5, 3, 0.0, False)], timeout_s=None)


def test_sidecars_are_judged_apart() -> None:
    d = StallDetector(TIMEOUT_S)
    assert not d.observe("a", 0.0, 1, 1, 0.0)
    assert not d.observe("b", 0.0, 1, 1, 0.0)
    assert not d.observe("b", 5.0, 2, 1, 0.0)
    assert d.observe("a", 10.0, 1, 1, 0.0)
    assert not d.observe("b", 10.0, 2, 1, 0.0)
