"""Who is asking: API key -> tenant, the tenant's limits per model, and its priority cap."""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from gateway.config.tenants import (
    PRIORITY_MIN,
    ModelOverride,
    ObjectiveConfig,
    RateLimits,
    TenantConfig,
    UnknownFieldsMode,
    check_tenancy,
)
from gateway.policy.grants import EXPIRED, Grant
from gateway.types import Unauthorized

ANONYMOUS: Final = "anonymous"

# Where each protocol's clients send their key, as a 401 without one names it.
BEARER: Final = "'Authorization: Bearer <key>'"  # OpenAI's routes
X_API_KEY: Final = "'x-api-key: <key>'"  # Anthropic's (/v1/messages; Bearer works too)
GRPC_METADATA: Final = "the 'authorization' metadata ('Bearer <key>')"  # gRPC's


@dataclass(frozen=True, slots=True)
class Limits:
    """A tenant's resolved limits on one model; a rate of None means no limit."""

    requests_per_s: float | None = None
    requests_burst: int = 1
    tokens_per_min: float | None = None
    tokens_burst: int = 1
    max_concurrent: int | None = None
    default_priority: int = 0
    max_priority: int = 0


UNLIMITED: Final = Limits()


@dataclass(frozen=True, slots=True)
class Buckets:
    """The two bucket settings of a `RateLimits`, bursts filled in."""

    requests_per_s: float | None
    requests_burst: int
    tokens_per_min: float | None
    tokens_burst: int


def buckets(c: RateLimits) -> Buckets:
    """Default bursts: one second of requests (at least 1), one minute of tokens."""
    rps, tpm = c.requests_per_s, c.tokens_per_min
    rb = c.requests_burst
    if rb is None:
        rb = max(1, math.ceil(rps)) if rps is not None else 1
    tb = c.tokens_burst
    if tb is None:
        tb = max(1, math.ceil(tpm)) if tpm is not None else 1
    return Buckets(rps, rb, tpm, tb)


@dataclass(frozen=True, slots=True, eq=False)
class Tenant:
    name: str
    weight: float = 1.0
    defaults: Limits = UNLIMITED
    per_model: Mapping[str, Limits] = field(default_factory=dict)
    resumable: bool | None = None  # its streams kept for resume (None: as their route says)
    unknown_fields: UnknownFieldsMode | None = None  # (None: as the gateway's setting says)
    objectives: ObjectiveConfig | None = None  # its requests' targets (None: their class's)

    def limits(self, model: str) -> Limits:
        return self.per_model.get(model, self.defaults)

    def priority(self, model: str, requested: int | None) -> int:
        """The class a request runs at: the default class, or the one asked for, capped at the
        tenant's maximum (and at PRIORITY_MIN from below)."""
        lim = self.per_model.get(model, self.defaults)
        if requested is None:
            return lim.default_priority
        if requested > lim.max_priority:
            return lim.max_priority
        return requested if requested > PRIORITY_MIN else PRIORITY_MIN

    @classmethod
    def from_config(cls, c: TenantConfig) -> Tenant:
        per_model = {m: _limits(c, m, o) for m, o in c.models.items()}
        defaults = _limits(c, None, None)
        return cls(
            c.name,
            c.weight,
            defaults,
            per_model,
            c.resumable_streams,
            c.unknown_fields,
            c.objectives,
        )


def _limits(t: TenantConfig, model: str | None, o: ModelOverride | None) -> Limits:
    """The tenant's limits, or its limits on `model` under override `o`: a bucket whose rate
    the override leaves out is the tenant's bucket; other fields are inherited one by one."""
    b = buckets(t)
    rps, rb, tpm, tb = b.requests_per_s, b.requests_burst, b.tokens_per_min, b.tokens_burst
    conc = t.max_concurrent
    if o is not None:
        ob = buckets(o)
        if o.requests_per_s is not None:
            rps, rb = ob.requests_per_s, ob.requests_burst
        if o.tokens_per_min is not None:
            tpm, tb = ob.tokens_per_min, ob.tokens_burst
        if o.max_concurrent is not None:
            conc = o.max_concurrent
    default, top = t.priorities(model)
    return Limits(rps, rb, tpm, tb, conc, default, top)


def bearer_key(authorization: str | None) -> str | None:
    """The key of an `Authorization: Bearer <key>` header; None when absent or empty."""
    if not authorization:
        return None
    scheme, _, key = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    key = key.strip()
    return key or None


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class KeyLookup(Protocol):
    """The store's keys (gateway/runtime/keyring.py), by the SHA-256 of the key."""

    def lookup(self, digest: bytes) -> Grant | None: ...
    def team(self, tenant: str) -> Grant | None: ...


class Tenants:
    """Resolves API keys. Keys are held only as SHA-256 digests and looked up by digest, so the
    lookup time does not depend on how much of a guessed key is right.

    With no tenants configured and no store, every request (with or without a key) is the
    unlimited `anonymous` tenant. Otherwise a request without a key is the `anonymous` tenant
    if one is named, else 401; a key that is neither configured nor in the store is 401. A
    store key's tenant is its team: the config's tenant of that name, or one with no limits
    of its own.
    """

    __slots__ = ("_anonymous", "_by_digest", "_by_name", "_keys", "_teams", "open")

    def __init__(
        self,
        tenants: Sequence[TenantConfig] = (),
        anonymous: str | None = None,
        keys: KeyLookup | None = None,
    ) -> None:
        check_tenancy(tenants, anonymous)
        self._by_name = {t.name: Tenant.from_config(t) for t in tenants}
        self._by_digest = {_digest(k): self._by_name[t.name] for t in tenants for k in t.keys}
        self._keys = keys
        self._teams: dict[str, Tenant] = {}  # the store's teams that the config does not name
        self.open = not tenants and keys is None
        self._anonymous: Tenant | None
        if self.open:
            self._anonymous = Tenant(ANONYMOUS)
        else:
            self._anonymous = self._by_name[anonymous] if anonymous is not None else None

    def get(self, name: str) -> Tenant | None:
        return self._by_name.get(name)

    def names(self) -> Collection[str]:
        """The configured tenants' names."""
        return self._by_name.keys()

    def resumable(self, name: str) -> bool | None:
        """Tenant `name`'s word on keeping its streams for resume (None: it says nothing)."""
        t = self._by_name.get(name)
        return None if t is None else t.resumable

    def resolve(self, api_key: str | None, send: str = BEARER) -> Tenant:
        """The tenant of `api_key` (None or "" = no key); raises `Unauthorized` (401), which
        without a key says to `send` it (where the caller's protocol carries keys)."""
        return self.resolve_grant(api_key, send)[0]

    def resolve_grant(self, api_key: str | None, send: str = BEARER) -> tuple[Tenant, Grant | None]:
        """The tenant, and the store's grant its requests are charged to (None: none)."""
        if self.open:
            assert self._anonymous is not None
            return self._anonymous, None
        if not api_key:
            if self._anonymous is None:
                raise Unauthorized(f"missing API key: send {send}")
            return self._anonymous, self._team_grant(self._anonymous.name)
        digest = _digest(api_key)
        tenant = self._by_digest.get(digest)
        if tenant is not None:
            return tenant, self._team_grant(tenant.name)
        grant = None if self._keys is None else self._keys.lookup(digest)
        if grant is None:
            raise Unauthorized("invalid API key")
        if grant.expires is not None and time.time() >= grant.expires:
            raise Unauthorized(EXPIRED)
        return self._store_tenant(grant.tenant), grant

    def _team_grant(self, name: str) -> Grant | None:
        return None if self._keys is None else self._keys.team(name)

    def _store_tenant(self, name: str) -> Tenant:
        t = self._by_name.get(name) or self._teams.get(name)
        if t is None:
            t = self._teams[name] = Tenant(name)
        return t


def _bucket_settings(lim: Limits) -> tuple[object, ...]:
    """What an admission account is built from (priorities and weight are read per request)."""
    return (
        lim.requests_per_s,
        lim.requests_burst,
        lim.tokens_per_min,
        lim.tokens_burst,
        lim.max_concurrent,
    )


def _resolved(tenants: Sequence[TenantConfig]) -> dict[str, Tenant]:
    if not tenants:
        return {ANONYMOUS: Tenant(ANONYMOUS)}
    return {t.name: Tenant.from_config(t) for t in tenants}


def kept_tenants(old: Sequence[TenantConfig], new: Sequence[TenantConfig]) -> set[str]:
    """The tenants whose buckets and concurrency limit are the same in both configs on every
    model, so that their live levels carry over a reload (keys, weight, priorities may differ)."""
    before, after = _resolved(old), _resolved(new)
    kept = set()
    for name, t in after.items():
        o = before.get(name)
        if o is None:
            continue
        models = t.per_model.keys() | o.per_model.keys()
        same = _bucket_settings(t.defaults) == _bucket_settings(o.defaults) and all(
            _bucket_settings(t.limits(m)) == _bucket_settings(o.limits(m)) for m in models
        )
        if same:
            kept.add(name)
    return kept
