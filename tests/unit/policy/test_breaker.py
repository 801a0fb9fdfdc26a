"""The circuit breaker over Redis: a table of (time, event) steps and what it says after each."""

from __future__ import annotations

import pytest

from gateway.policy.breaker import Breaker, BreakerState

C, H, X = BreakerState.CLOSED, BreakerState.HALF_OPEN, BreakerState.OPEN  # X: open

# Steps: (now, event, expected): event "allow" expects (allowed, state); "ok"/"fail" expect the
# state after reporting. Threshold 3, cooldown 1 s doubling to at most 4 s.
CASES = {
    "failures below the threshold keep it closed": [
        (0.0, "fail", C),
        (0.1, "fail", C),
        (0.2, "allow", (True, C)),
    ],
    "a success resets the count": [
        (0.0, "fail", C),
        (0.1, "fail", C),
        (0.2, "ok", C),
        (0.3, "fail", C),
        (0.4, "fail", C),
        (0.5, "allow", (True, C)),
    ],
    "three in a row open it for the cooldown": [
        (0.0, "fail", C),
        (0.0, "fail", C),
        (0.0, "fail", X),
        (0.5, "allow", (False, X)),
        (0.99, "allow", (False, X)),
    ],
    "after the cooldown one probe, a success closes it": [
        *[(0.0, "fail", s) for s in (C, C, X)],
        (1.0, "allow", (True, H)),
        (1.0, "allow", (False, H)),  # the probe is out: others wait
        (1.1, "ok", C),
        (1.2, "allow", (True, C)),
    ],
    "a failed probe opens it for twice as long, capped": [
        *[(0.0, "fail", s) for s in (C, C, X)],
        (1.0, "allow", (True, H)),
        (1.1, "fail", X),
        (2.9, "allow", (False, X)),
        (3.1, "allow", (True, H)),
        (3.2, "fail", X),  # cooldown 4 s
        (7.1, "allow", (False, X)),
        (7.3, "allow", (True, H)),
        (7.4, "fail", X),  # still 4 s: the cap
        (11.3, "allow", (False, X)),
        (11.5, "allow", (True, H)),
        (11.6, "ok", C),
    ],
    "after closing, the cooldown starts again from the base": [
        *[(0.0, "fail", s) for s in (C, C, X)],
        (1.0, "allow", (True, H)),
        (1.0, "fail", X),
        (3.0, "allow", (True, H)),
        (3.0, "ok", C),
        *[(4.0, "fail", s) for s in (C, C, X)],
        (5.0, "allow", (True, H)),
    ],
    "a late failure of a call from before it opened changes nothing": [
        *[(0.0, "fail", s) for s in (C, C, X)],
        (0.5, "fail", X),
        (1.0, "allow", (True, H)),
    ],
    "a probe that never reports lets another through after the cooldown": [
        *[(0.0, "fail", s) for s in (C, C, X)],
        (1.0, "allow", (True, H)),
        (1.5, "allow", (False, H)),
        (2.0, "allow", (True, H)),
    ],
}


@pytest.mark.parametrize("steps", CASES.values(), ids=CASES.keys())
def test_breaker(steps: list[tuple[float, str, object]]) -> None:
    b = Breaker(failures=3, cooldown_s=1.0, max_cooldown_s=4.0)
    for i, (now, event, expected) in enumerate(steps):
        if event == "allow":
            got: object = (b.allow(now), b.state)
        else:
            (b.success if event == "ok" else b.failure)(now)
            got = b.state
        assert got == expected, f"step {i} ({now}, {event})"


@pytest.mark.parametrize(
    "args", [(0, 1.0, 2.0), (1, 0.0, 1.0), (1, 2.0, 1.0)], ids=["failures", "zero", "max"]
)
def test_bad_settings(args: tuple[int, float, float]) -> None:
    with pytest.raises(ValueError):
        Breaker(*args)
