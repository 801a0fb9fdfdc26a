"""What the reserve script answered, as the gateway's admission verdict: the same statuses,
reasons, Retry-After and x-ratelimit-* headers as the local buckets give
(gateway/policy/admission.py). Pure."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.policy.admission import (
    CONCURRENCY_RETRY_AFTER_S,
    LIMIT_REQUESTS,
    LIMIT_TOKENS,
    POOL_STATUS,
    REMAINING_REQUESTS,
    REMAINING_TOKENS,
    RESET_REQUESTS,
    RESET_TOKENS,
    RETRY_AFTER,
    RETRY_AFTER_MS,
    TENANT_STATUS,
    Headers,
    Rejected,
    format_reset,
)

ADMITTED, CONCURRENCY, REQUESTS, TOKENS, TOO_LARGE = range(5)


@dataclass(frozen=True, slots=True)
class Spec:
    """One set of shared buckets: a tenant's on a model (with its concurrency) or a model
    pool's. A rate of None: no limit on that dimension."""

    requests_per_s: float | None
    requests_burst: int
    tokens_per_min: float | None
    tokens_burst: int
    max_concurrent: int | None = None

    @property
    def requests_ms(self) -> float:
        """Milliseconds one request takes to refill (0: no limit)."""
        return 0.0 if self.requests_per_s is None else 1000.0 / self.requests_per_s

    @property
    def tokens_ms(self) -> float:
        return 0.0 if self.tokens_per_min is None else 60_000.0 / self.tokens_per_min

    @property
    def limited(self) -> bool:
        return (
            self.requests_per_s is not None
            or self.tokens_per_min is not None
            or self.max_concurrent is not None
        )


@dataclass(frozen=True, slots=True)
class Answer:
    code: int
    wait_s: float  # inf: never (more tokens than the burst)
    requests_remaining: int
    requests_reset_s: float
    tokens_remaining: int
    tokens_reset_s: float

    @classmethod
    def of(cls, reply: Sequence[object]) -> Answer:
        code, wait, rr, rz, tr, tz = (int(str(v)) for v in reply)
        return cls(code, math.inf if wait < 0 else wait / 1e6, rr, rz / 1e6, tr, tz / 1e6)


def _text(burst: int) -> str:
    return str(burst)


def headers(tenant: tuple[Spec, Answer] | None, pool: tuple[Spec, Answer] | None) -> Headers:
    """The tenant's buckets; for a dimension the tenant has no limit on, the pool's."""
    out: list[tuple[str, str]] = []
    req = next((p for p in (tenant, pool) if p and p[0].requests_per_s is not None), None)
    tok = next((p for p in (tenant, pool) if p and p[0].tokens_per_min is not None), None)
    if req is not None:
        s, a = req
        out += [
            (LIMIT_REQUESTS, _text(s.requests_burst)),
            (REMAINING_REQUESTS, str(a.requests_remaining)),
            (RESET_REQUESTS, format_reset(a.requests_reset_s)),
        ]
    if tok is not None:
        s, a = tok
        out += [
            (LIMIT_TOKENS, _text(s.tokens_burst)),
            (REMAINING_TOKENS, str(a.tokens_remaining)),
            (RESET_TOKENS, format_reset(a.tokens_reset_s)),
        ]
    return tuple(out)


def verdict(
    tenant: tuple[Spec, Answer] | None, pool: tuple[Spec, Answer] | None, estimate: int
) -> Rejected | None:
    """None when both admitted; else why not, in the local admission's order: concurrency,
    a request larger than a burst, the tenant's buckets, the pool's."""
    t = tenant[1] if tenant else None
    p = pool[1] if pool else None
    hs = headers(tenant, pool)
    if t is not None and t.code == CONCURRENCY:
        assert tenant is not None
        reason = f"too many concurrent requests (limit {tenant[0].max_concurrent})"
        return _reject(TENANT_STATUS, reason, CONCURRENCY_RETRY_AFTER_S, hs, False)
    for who, a in (("the tenant's", t), ("the model's", p)):
        if a is not None and a.code == TOO_LARGE:
            reason = f"request too large: {estimate} tokens exceed {who} tokens burst"
            return _reject(TENANT_STATUS, reason, None, hs, True)
    pool_wait = p.wait_s if p is not None and p.code != ADMITTED else 0.0
    if t is not None and t.code != ADMITTED:
        tokens = t.code == TOKENS
        reason = "tokens per minute exceeded" if tokens else "requests per second exceeded"
        return _reject(TENANT_STATUS, reason, max(t.wait_s, pool_wait), hs, tokens)
    if p is not None and p.code != ADMITTED:
        reason = "model is at its global rate limit"
        return _reject(POOL_STATUS, reason, pool_wait, hs, p.code == TOKENS)
    return None


def _reject(
    status: int, reason: str, retry_after_s: float | None, hs: Headers, tokens: bool
) -> Rejected:
    if retry_after_s is not None:
        secs = str(max(1, math.ceil(retry_after_s)))
        ms = str(max(1, math.ceil(retry_after_s * 1000)))
        hs += ((RETRY_AFTER, secs), (RETRY_AFTER_MS, ms))
    return Rejected(status, reason, retry_after_s, hs, tokens)
