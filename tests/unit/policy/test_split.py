"""One instance's part of a tenant's or a pool's limits in the Redis fallback."""

from __future__ import annotations

import pytest

from gateway.config.tenants import RateLimits
from gateway.policy.split import split_limits, split_rate_limits, split_tenant
from gateway.policy.tenants import Limits, Tenant

FULL = Limits(
    requests_per_s=0.1,
    requests_burst=5,
    tokens_per_min=600.0,
    tokens_burst=1000,
    max_concurrent=3,
    default_priority=2,
    max_priority=4,
)


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (1, FULL),
        (2, Limits(0.05, 3, 300.0, 500, 2, 2, 4)),
        (3, Limits(0.1 / 3, 2, 200.0, 334, 1, 2, 4)),
        (8, Limits(0.1 / 8, 1, 75.0, 125, 1, 2, 4)),  # never below 1
    ],
)
def test_split_limits(n: int, expected: Limits) -> None:
    assert split_limits(FULL, n) == expected


def test_no_limit_stays_no_limit() -> None:
    assert split_limits(Limits(), 4) == Limits()


def test_split_tenant_keeps_name_weight_and_overrides() -> None:
    t = Tenant("acme", 2.0, FULL, {"m": Limits(requests_per_s=4.0, requests_burst=4)})
    s = split_tenant(t, 2)
    assert (s.name, s.weight) == ("acme", 2.0)
    assert s.defaults == split_limits(FULL, 2)
    assert s.limits("m") == Limits(requests_per_s=2.0, requests_burst=2)


@pytest.mark.parametrize(
    ("limits", "n", "expected"),
    [
        (RateLimits(requests_per_s=10), 4, RateLimits(requests_per_s=2.5, requests_burst=3)),
        (
            RateLimits(tokens_per_min=90, tokens_burst=30),
            2,
            RateLimits(tokens_per_min=45, tokens_burst=15),
        ),
        (RateLimits(requests_per_s=3), 1, RateLimits(requests_per_s=3)),
    ],
)
def test_split_rate_limits(limits: RateLimits, n: int, expected: RateLimits) -> None:
    # The default burst (one second of requests) is taken from the whole rate, then split.
    assert split_rate_limits(limits, n) == expected
