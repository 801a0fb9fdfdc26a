"""One instance's part of a limit shared by `n` instances: the local fallback while the shared
store (Redis) is away. Rates are divided by `n`; bursts and concurrency are divided and rounded
up (never below 1), so `n` parts together allow at most `limit + n - 1` at once."""

from __future__ import annotations

import math
from dataclasses import replace

import msgspec

from gateway.config.tenants import RateLimits
from gateway.policy.tenants import Limits, Tenant, buckets


def _count(c: int, n: int) -> int:
    return max(1, math.ceil(c / n))


def _rate(r: float | None, n: int) -> float | None:
    return None if r is None else r / n


def split_limits(lim: Limits, n: int) -> Limits:
    if n <= 1:
        return lim
    conc = lim.max_concurrent
    return replace(
        lim,
        requests_per_s=_rate(lim.requests_per_s, n),
        requests_burst=_count(lim.requests_burst, n),
        tokens_per_min=_rate(lim.tokens_per_min, n),
        tokens_burst=_count(lim.tokens_burst, n),
        max_concurrent=None if conc is None else _count(conc, n),
    )


def split_tenant(t: Tenant, n: int) -> Tenant:
    if n <= 1:
        return t
    per_model = {m: split_limits(lim, n) for m, lim in t.per_model.items()}
    return Tenant(t.name, t.weight, split_limits(t.defaults, n), per_model)


def split_rate_limits(c: RateLimits, n: int) -> RateLimits:
    """A model pool's limits: the bursts left out default from the full rates first."""
    if n <= 1:
        return c
    b = buckets(c)
    return msgspec.structs.replace(
        c,
        requests_per_s=_rate(b.requests_per_s, n),
        requests_burst=None if b.requests_per_s is None else _count(b.requests_burst, n),
        tokens_per_min=_rate(b.tokens_per_min, n),
        tokens_burst=None if b.tokens_per_min is None else _count(b.tokens_burst, n),
    )
