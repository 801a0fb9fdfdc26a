"""Percentiles and distribution summaries (milliseconds in reports)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import msgspec


class Dist(msgspec.Struct, frozen=True, kw_only=True):
    """A latency distribution in milliseconds; zeros when `count` is 0."""

    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of sorted values, interpolating linearly between ranks."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside [0, 100]")
    rank = (n - 1) * q / 100
    lo = math.floor(rank)
    hi = min(lo + 1, n - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (rank - lo)


def dist_ms(values_s: Iterable[float]) -> Dist:
    """Summary of durations given in seconds; NaNs (no value) are left out."""
    v = sorted(x * 1000.0 for x in values_s if not math.isnan(x))
    if not v:
        return Dist(count=0, mean=0.0, p50=0.0, p90=0.0, p99=0.0, max=0.0)
    return Dist(
        count=len(v),
        mean=math.fsum(v) / len(v),
        p50=percentile(v, 50),
        p90=percentile(v, 90),
        p99=percentile(v, 99),
        max=v[-1],
    )
