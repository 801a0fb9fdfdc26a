from __future__ import annotations

import pytest

from gateway.policy.progress import StallDetector

TIMEOUT_S = 10.0

# Steps, each one of:
#   ("obs", now, steps, work, output_at, stalled)  observe; `stalled` is the expected answer
#   ("forgive", seconds)                            the gateway itself was stalled that long
#   ("forget",)                                     the link closed
Step = tuple[object, ...]


def run(steps: list[Step], timeout_s: float | None = TIMEOUT_S) -> None:
    d = StallDetector(timeout_s)
    for i, step in enumerate(steps):
        match step:
            case ("obs", now, counter, work, output_at, expected):
                got = d.observe("a", now, counter, work, output_at)  # type: ignore[arg-type]
                assert got is expected, f"step {i}: {step}"
            case ("forgive", seconds):
                d.forgive(seconds)  # type: ignore[arg-type]
            case ("forget",):
                d.forget("a")
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


def test_without_a_timeout_nothing_stalls() -> None:
    run([("obs", 0.0, 5, 3, 0.0, False), ("obs", 1e9, 5, 3, 0.0, False)], timeout_s=None)


def test_sidecars_are_judged_apart() -> None:
    d = StallDetector(TIMEOUT_S)
    assert not d.observe("a", 0.0, 1, 1, 0.0)
    assert not d.observe("b", 0.0, 1, 1, 0.0)
    assert not d.observe("b", 5.0, 2, 1, 0.0)
    assert d.observe("a", 10.0, 1, 1, 0.0)
    assert not d.observe("b", 10.0, 2, 1, 0.0)
