"""Admission: the tenant's and the model pool's token buckets and concurrency, per request.

`admit` charges 1 request and an estimate of the tokens (prompt + max_tokens) up front, all or
nothing; `complete` reconciles the tokens with the real usage. Buckets are kept per (tenant,
model): a tenant's limits apply to each model separately, as OpenAI's do. Pool limits are one
pair of buckets per model shared by every tenant.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from gateway.config.tenants import RateLimits
from gateway.policy.tenants import Tenant, buckets
from gateway.policy.token_bucket import TokenBucket
from gateway.types import GenerationRequest

Headers = tuple[tuple[str, str], ...]

LIMIT_REQUESTS: Final = "x-ratelimit-limit-requests"
REMAINING_REQUESTS: Final = "x-ratelimit-remaining-requests"
RESET_REQUESTS: Final = "x-ratelimit-reset-requests"
LIMIT_TOKENS: Final = "x-ratelimit-limit-tokens"
REMAINING_TOKENS: Final = "x-ratelimit-remaining-tokens"
RESET_TOKENS: Final = "x-ratelimit-reset-tokens"
RETRY_AFTER: Final = "retry-after"
RETRY_AFTER_MS: Final = "retry-after-ms"

# Over the tenant's own limits: 429. Over the pool's limit shared by all tenants: 503.
TENANT_STATUS: Final = 429
POOL_STATUS: Final = 503
# A concurrency slot frees when some request ends: no bucket to compute a wait from.
CONCURRENCY_RETRY_AFTER_S: Final = 1.0


def estimate_prompt_tokens(req: GenerationRequest) -> int:
    """UTF-8 bytes of the prompt (or of the messages' contents) / 4, rounded up."""
    n = 0
    if req.prompt is not None:
        s = req.prompt
        n = len(s) if s.isascii() else len(s.encode())
    elif req.messages is not None:
        for m in req.messages:
            s = m.content
            n += len(s) if s.isascii() else len(s.encode())
    elif req.prompt_token_ids is not None:
        return len(req.prompt_token_ids)  # exact
    return (n + 3) // 4


def estimate_tokens(req: GenerationRequest) -> int:
    """What admission reserves: the estimated prompt plus every token the request may get."""
    return estimate_prompt_tokens(req) + req.sampling.max_tokens


def format_reset(seconds: float) -> str:
    """A duration as OpenAI writes its reset headers: "20ms", "1s", "1.5s", "6m0s", "1h0m0s".
    Rounded up to the millisecond, so that waiting that long is enough."""
    if seconds <= 0:
        return "0s"
    ms = math.ceil(seconds * 1000 - 1e-6)
    if ms < 1000:
        return f"{max(ms, 1)}ms"
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s = str(ms // 1000) if ms % 1000 == 0 else f"{ms / 1000:.3f}".rstrip("0")
    if h:
        return f"{h}h{m}m{s}s"
    if m:
        return f"{m}m{s}s"
    return f"{s}s"


def _bucket(per_s: float | None, burst: int, now: float) -> TokenBucket | None:
    return None if per_s is None else TokenBucket(burst, per_s, now)


class _Account:
    """One tenant on one model."""

    __slots__ = ("inflight", "max_concurrent", "requests", "tokens")

    def __init__(self, tenant: Tenant, model: str, now: float) -> None:
        lim = tenant.limits(model)
        self.requests = _bucket(lim.requests_per_s, lim.requests_burst, now)
        tpm = lim.tokens_per_min
        self.tokens = _bucket(None if tpm is None else tpm / 60.0, lim.tokens_burst, now)
        self.max_concurrent = lim.max_concurrent
        self.inflight = 0


class _Pool:
    __slots__ = ("requests", "tokens")

    def __init__(self, limits: RateLimits, now: float) -> None:
        b = buckets(limits)
        self.requests = _bucket(b.requests_per_s, b.requests_burst, now)
        tpm = b.tokens_per_min
        self.tokens = _bucket(None if tpm is None else tpm / 60.0, b.tokens_burst, now)


class Admitted:
    """The ticket of an admitted request: hand it to `Admission.complete` exactly once (more
    calls are ignored). `headers` are the rate-limit values right after the charge."""

    __slots__ = ("_account", "_open", "_pool", "charged", "headers", "model", "tenant")

    def __init__(
        self,
        tenant: Tenant,
        model: str,
        charged: int,
        headers: Headers,
        account: _Account,
        pool: _Pool | None,
    ) -> None:
        self.tenant = tenant
        self.model = model
        self.charged = charged
        self.headers = headers
        self._account = account
        self._pool = pool
        self._open = True


@dataclass(frozen=True, slots=True)
class Rejected:
    """`headers` hold the rate-limit values and, when a retry can succeed, `retry-after`
    (whole seconds, rounded up) and `retry-after-ms`. `retry_after_s` is None when retrying
    cannot help (the request alone is larger than a token burst)."""

    status: int
    reason: str
    retry_after_s: float | None
    headers: Headers
    tokens: bool = False  # the tokens bucket (not the requests one) refused it


def _wait(b: TokenBucket | None, n: float, now: float) -> float:
    return 0.0 if b is None else b.time_until(n, now)


class Admission:
    """Per-request admission over (tenant, model) accounts and per-model pools.

    Accounts are created on first use: call `admit` only for models that exist, so that the
    number of accounts stays bounded by tenants x models.
    """

    __slots__ = ("_accounts", "_pool_limits", "_pools")

    def __init__(self, model_limits: Mapping[str, RateLimits] | None = None) -> None:
        self._pool_limits = dict(model_limits or {})
        self._accounts: dict[tuple[str, str], _Account] = {}
        self._pools: dict[str, _Pool] = {}

    def carry_over(self, old: Admission, unchanged_tenants: Iterable[str]) -> None:
        """After a config reload: keep the live bucket levels and in-flight counts of the
        tenants whose config did not change, and of model pools whose limits did not."""
        keep = set(unchanged_tenants)
        for key, acc in old._accounts.items():
            if key[0] in keep:
                self._accounts[key] = acc
        for model, pool in old._pools.items():
            if self._pool_limits.get(model) == old._pool_limits.get(model):
                self._pools[model] = pool

    def _account(self, tenant: Tenant, model: str, now: float) -> _Account:
        key = (tenant.name, model)
        acc = self._accounts.get(key)
        if acc is None:
            acc = self._accounts[key] = _Account(tenant, model, now)
        return acc

    def _pool(self, model: str, now: float) -> _Pool | None:
        pool = self._pools.get(model)
        if pool is None:
            limits = self._pool_limits.get(model)
            if limits is None:
                return None
            pool = self._pools[model] = _Pool(limits, now)
        return pool

    def admit(self, tenant: Tenant, model: str, estimate: int, now: float) -> Admitted | Rejected:
        """Charge 1 request and `estimate` tokens to the tenant's and the pool's buckets, and
        take a concurrency slot; or charge nothing and say why not."""
        acc = self._account(tenant, model, now)
        pool = self._pool(model, now)
        if acc.max_concurrent is not None and acc.inflight >= acc.max_concurrent:
            reason = f"too many concurrent requests (limit {acc.max_concurrent})"
            return self._reject(TENANT_STATUS, reason, CONCURRENCY_RETRY_AFTER_S, acc, pool, now)
        wait = max(_wait(acc.requests, 1, now), _wait(acc.tokens, estimate, now))
        pool_wait = 0.0
        if pool is not None:
            pool_wait = max(_wait(pool.requests, 1, now), _wait(pool.tokens, estimate, now))
        if wait > 0 or pool_wait > 0:
            return self._refuse(wait, pool_wait, estimate, acc, pool, now)
        if acc.requests is not None:
            acc.requests.charge(1, now)
        if acc.tokens is not None:
            acc.tokens.charge(estimate, now)
        if pool is not None:
            if pool.requests is not None:
                pool.requests.charge(1, now)
            if pool.tokens is not None:
                pool.tokens.charge(estimate, now)
        acc.inflight += 1
        return Admitted(tenant, model, estimate, _headers(acc, pool, now), acc, pool)

    def complete(self, ticket: Admitted, actual_tokens: int, now: float) -> None:
        """Reconcile with the real usage (prompt + generated; whatever it was for aborted or
        failed requests): refund what was reserved and not used, charge what was used beyond
        the reservation (a debt the refill pays back). Frees the concurrency slot."""
        if not ticket._open:
            return
        ticket._open = False
        acc, pool = ticket._account, ticket._pool
        acc.inflight -= 1
        delta = actual_tokens - ticket.charged
        if delta == 0:
            return
        for b in (acc.tokens, pool.tokens if pool is not None else None):
            if b is None:
                continue
            if delta < 0:
                b.give_back(-delta, now)
            else:
                b.charge(delta, now)

    def headers(self, tenant: Tenant, model: str, now: float) -> Headers:
        """The rate-limit header values of `tenant` on `model` now."""
        return _headers(self._account(tenant, model, now), self._pool(model, now), now)

    def _refuse(
        self,
        wait: float,
        pool_wait: float,
        estimate: int,
        acc: _Account,
        pool: _Pool | None,
        now: float,
    ) -> Rejected:
        if math.isinf(wait) or math.isinf(pool_wait):
            whose = "the tenant's" if math.isinf(wait) else "the model's"
            reason = f"request too large: {estimate} tokens exceed {whose} tokens burst"
            return self._reject(TENANT_STATUS, reason, None, acc, pool, now, tokens=True)
        if wait > 0:
            # Retrying after both waits succeeds unless other tenants drain the pool meanwhile.
            both = max(wait, pool_wait)
            tokens_short = _wait(acc.tokens, estimate, now) > 0
            reason = (
                "tokens per minute exceeded" if tokens_short else "requests per second exceeded"
            )
            return self._reject(TENANT_STATUS, reason, both, acc, pool, now, tokens=tokens_short)
        reason = "model is at its global rate limit"
        assert pool is not None
        tokens_short = _wait(pool.tokens, estimate, now) > 0
        return self._reject(POOL_STATUS, reason, pool_wait, acc, pool, now, tokens=tokens_short)

    @staticmethod
    def _reject(
        status: int,
        reason: str,
        retry_after_s: float | None,
        acc: _Account,
        pool: _Pool | None,
        now: float,
        tokens: bool = False,
    ) -> Rejected:
        headers = _headers(acc, pool, now)
        if retry_after_s is not None:
            secs = str(max(1, math.ceil(retry_after_s)))
            ms = str(max(1, math.ceil(retry_after_s * 1000)))
            headers += ((RETRY_AFTER, secs), (RETRY_AFTER_MS, ms))
        return Rejected(status, reason, retry_after_s, headers, tokens)


def _trio(b: TokenBucket, now: float) -> tuple[str, str, str]:
    level = b.level(now)
    remaining = str(int(level + 1e-6)) if level > 0 else "0"
    return b.capacity_text, remaining, format_reset((b.capacity - level) / b.rate_per_s)


def _headers(acc: _Account, pool: _Pool | None, now: float) -> Headers:
    """The tenant's buckets; for a dimension the tenant has no limit on, the pool's; none if
    neither has one."""
    req = acc.requests if acc.requests is not None else pool.requests if pool else None
    tok = acc.tokens if acc.tokens is not None else pool.tokens if pool else None
    if req is None:
        if tok is None:
            return ()
        tl, tr, tz = _trio(tok, now)
        return ((LIMIT_TOKENS, tl), (REMAINING_TOKENS, tr), (RESET_TOKENS, tz))
    rl, rr, rz = _trio(req, now)
    if tok is None:
        return ((LIMIT_REQUESTS, rl), (REMAINING_REQUESTS, rr), (RESET_REQUESTS, rz))
    tl, tr, tz = _trio(tok, now)
    return (
        (LIMIT_REQUESTS, rl),
        (REMAINING_REQUESTS, rr),
        (RESET_REQUESTS, rz),
        (LIMIT_TOKENS, tl),
        (REMAINING_TOKENS, tr),
        (RESET_TOKENS, tz),
    )
