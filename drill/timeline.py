"""Detection, take-out and recovery times from the gateway's sampled state (pure).

A sample is what one scrape saw: each sidecar's `shardgate_replica_state` and the number of
routable replicas of the model in /readyz, stamped with the time the scrape returned (so each
time is an upper bound, late by at most one sampling interval).

- detected: the first sample at or after the injection where a target sidecar is not UP, or
  fewer replicas than the baseline are routable;
- taken out: the first such sample where a target is DOWN or EJECTED, or fewer are routable;
- recovered: counted from the moment the fault was cleared, the first sample from which on every
  target stays UP and the baseline is routable again, to the end of the window. None when the
  fault was never detected (nothing to recover from) or the window ends unrecovered.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from drill.scrape import DOWN, EJECTED, UP


@dataclass(frozen=True, slots=True)
class Sample:
    t: float  # monotonic seconds
    states: Mapping[str, int]  # sidecar address -> shardgate_replica_state
    routable: int | None  # routable replicas of the model (None: unknown)


@dataclass(frozen=True, slots=True)
class Timings:
    detect_s: float | None
    takeout_s: float | None
    recover_s: float | None
    recovered: bool  # the window ended with the targets UP and the baseline routable


def degraded(s: Sample, targets: Sequence[str], baseline: int) -> bool:
    if any(s.states.get(a, DOWN) != UP for a in targets):
        return True
    return s.routable is not None and s.routable < baseline


def out_of_rotation(s: Sample, targets: Sequence[str], baseline: int) -> bool:
    if any(s.states.get(a, DOWN) in (DOWN, EJECTED) for a in targets):
        return True
    return s.routable is not None and s.routable < baseline


def healthy(s: Sample, targets: Sequence[str], baseline: int) -> bool:
    return not degraded(s, targets, baseline) and s.routable is not None


def first_after(samples: Sequence[Sample], since: float, pred: Callable[[Sample], bool]) -> float:
    """Seconds from `since` to the first sample at or after it that matches (-1: none)."""
    for s in samples:
        if s.t >= since and pred(s):
            return s.t - since
    return -1.0


def stable_after(samples: Sequence[Sample], since: float, pred: Callable[[Sample], bool]) -> float:
    """Seconds from `since` to the first sample after which every sample matches (-1: none)."""
    found = -1.0
    for s in samples:
        if s.t < since:
            continue
        if not pred(s):
            found = -1.0
        elif found < 0:
            found = s.t - since
    return found


def timings(
    samples: Sequence[Sample],
    targets: Sequence[str],
    baseline: int,
    injected: float,
    cleared: float,
) -> Timings:
    ordered = sorted(samples, key=lambda s: s.t)
    detect = first_after(ordered, injected, lambda s: degraded(s, targets, baseline))
    takeout = first_after(ordered, injected, lambda s: out_of_rotation(s, targets, baseline))
    well = stable_after(ordered, cleared, lambda s: healthy(s, targets, baseline))
    recovered = well >= 0
    return Timings(
        detect_s=_opt(detect),
        takeout_s=_opt(takeout),
        recover_s=_opt(well) if detect >= 0 else None,
        recovered=recovered,
    )


def recovered_now(samples: Sequence[Sample], targets: Sequence[str], baseline: int) -> bool:
    """Whether the latest sample shows the targets UP and the baseline routable."""
    return bool(samples) and healthy(samples[-1], targets, baseline)


def max_gap(samples: Sequence[Sample], since: float, until: float) -> float:
    """The longest time in [since, until] without a sample (the whole span if none)."""
    times = sorted(s.t for s in samples if since <= s.t <= until)
    edges = [since, *times, until]
    return max((b - a for a, b in itertools.pairwise(edges)), default=0.0)


def changes(
    samples: Sequence[Sample], targets: Sequence[str], since: float
) -> list[tuple[float, list[int], int | None]]:
    """The samples where what the gateway showed of the targets changed: (seconds after `since`,
    the targets' states, routable replicas); the first sample is always there."""
    out: list[tuple[float, list[int], int | None]] = []
    last: tuple[list[int], int | None] | None = None
    for s in sorted(samples, key=lambda s: s.t):
        now = ([s.states.get(a, DOWN) for a in targets], s.routable)
        if now != last:
            out.append((round(s.t - since, 3), *now))
            last = now
    return out


def _opt(x: float) -> float | None:
    return None if x < 0 else x
