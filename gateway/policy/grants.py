"""What a key from the store may do: its models, its expiry, its per-minute limits and its
budget, and those of its team. Pure: the clocks are passed in (wall time for expiry and budget
windows, the monotonic clock for the buckets).

`admit` checks all of them and reserves the request's worst-case cost on the key's budget and
its team's; `settle` lets the reserve go and counts the real cost, and trues the tokens bucket
up to the real usage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gateway.policy.budget import Budget
from gateway.policy.token_bucket import TokenBucket
from gateway.types import RateLimited, Unauthorized

BUDGET_EXCEEDED = "budget_exceeded"
EXPIRED = "Authentication Error - Expired Key"


class BudgetExceeded(RateLimited):
    type = BUDGET_EXCEEDED
    reason = "budget"


@dataclass(slots=True, eq=False)
class Allowance:
    """One key's or one team's limits and budget; `name` says which in a refusal."""

    name: str
    budget: Budget
    models: frozenset[str] = frozenset()  # empty: every model
    requests: TokenBucket | None = None  # rpm_limit: that many a minute, that many at once
    tokens: TokenBucket | None = None  # tpm_limit


def buckets(rpm: int | None, tpm: int | None, now: float) -> tuple[TokenBucket | None, ...]:
    r = None if rpm is None else TokenBucket(rpm, rpm / 60.0, now)
    t = None if tpm is None else TokenBucket(tpm, tpm / 60.0, now)
    return r, t


@dataclass(slots=True, eq=False)
class Grant:
    """A key: `tenant` is the team its requests count to."""

    token: str
    tenant: str
    own: Allowance
    team: Allowance | None = None
    expires: float | None = None
    alias: str | None = None


@dataclass(slots=True, eq=False)
class Charge:
    grant: Grant
    reserve_usd: float
    tokens: int
    allowances: tuple[Allowance, ...] = field(default=())
    open: bool = True


def _headers(wait_s: float) -> tuple[tuple[str, str], ...]:
    if not math.isfinite(wait_s):
        return ()
    return (("retry-after", str(max(1, math.ceil(wait_s)))),)


def _check(a: Allowance, model: str, estimate: int, wall: float, mono: float) -> None:
    if a.models and model not in a.models:
        allowed = ", ".join(sorted(a.models))
        raise Unauthorized(f"{a.name} is not allowed to call model {model} (only: {allowed})")
    b = a.budget
    if not b.allows(wall):
        wait = (b.reset_at - wall) if b.reset_at is not None else math.inf
        raise BudgetExceeded(
            f"Budget has been exceeded: {a.name} spent ${b.spent:.6f} "
            f"of its ${b.limit:.6f} budget"
            + ("" if b.reset_at is None else f" (it resets in {max(0.0, wait):.0f} s)"),
            None,
            _headers(wait),
        )
    for bucket, n, what in ((a.requests, 1, "requests"), (a.tokens, estimate, "tokens")):
        if bucket is not None:
            wait = bucket.time_until(n, mono)
            if wait > 0:
                err = RateLimited(
                    f"Rate limit reached: {a.name}'s {what} per minute "
                    f"(limit {bucket.capacity:.0f})",
                    None,
                    _headers(wait),
                )
                err.reason = "rate_" + what
                raise err


def admit(
    grant: Grant, model: str, estimate: int, worst_usd: float, wall: float, mono: float
) -> Charge:
    """Charge a request or raise why not (401 expired or not allowed, 429 over a limit or a
    budget); nothing is charged when it raises."""
    if grant.expires is not None and wall >= grant.expires:
        raise Unauthorized(EXPIRED)
    allowances = (grant.own,) if grant.team is None else (grant.own, grant.team)
    for a in allowances:
        _check(a, model, estimate, wall, mono)
    for a in allowances:
        a.budget.reserve(worst_usd)
        if a.requests is not None:
            a.requests.charge(1, mono)
        if a.tokens is not None:
            a.tokens.charge(estimate, mono)
    return Charge(grant, worst_usd, estimate, allowances)


def settle(charge: Charge, used_tokens: int, usd: float, wall: float, mono: float) -> None:
    """The request ended (exactly once; later calls do nothing)."""
    if not charge.open:
        return
    charge.open = False
    for a in charge.allowances:
        a.budget.settle(charge.reserve_usd, usd, wall)
        if a.tokens is not None:
            extra = used_tokens - charge.tokens
            if extra > 0:
                a.tokens.charge(extra, mono)
            elif extra < 0:
                a.tokens.give_back(-extra, mono)
