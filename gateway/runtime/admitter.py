"""What the service admits requests through, local buckets or shared ones (Redis): the service
does not know which.

`reserve` charges 1 request and the token estimate (or says why not); `complete` settles a
ticket with the real usage, exactly once, without waiting (a shared store is updated off the
request path); `reconfigure` takes a reloaded config's limits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from gateway.config.tenants import RateLimits
from gateway.policy.admission import Admission, Admitted, Headers, Rejected
from gateway.policy.tenants import Tenant


class Ticket(Protocol):
    """An admitted request's charge: the tokens reserved, the rate-limit headers after it."""

    @property
    def charged(self) -> int: ...
    @property
    def headers(self) -> Headers: ...


class Admitter(Protocol):
    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def reserve(
        self, tenant: Tenant, model: str, estimate: int, now: float
    ) -> Ticket | Rejected: ...
    def complete(self, ticket: Ticket, actual_tokens: int, now: float) -> None: ...
    def reconfigure(
        self, model_limits: Mapping[str, RateLimits], unchanged_tenants: Iterable[str]
    ) -> None: ...


class LocalAdmission:
    """This process's own buckets (with `--workers N`, each holds 1/N of every limit)."""

    __slots__ = ("policy",)

    def __init__(self, model_limits: Mapping[str, RateLimits] | None = None) -> None:
        self.policy = Admission(model_limits)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def reserve(
        self, tenant: Tenant, model: str, estimate: int, now: float
    ) -> Ticket | Rejected:
        return self.policy.admit(tenant, model, estimate, now)

    def complete(self, ticket: Ticket, actual_tokens: int, now: float) -> None:
        assert isinstance(ticket, Admitted)
        self.policy.complete(ticket, actual_tokens, now)

    def reconfigure(
        self, model_limits: Mapping[str, RateLimits], unchanged_tenants: Iterable[str]
    ) -> None:
        """Live levels and in-flight counts carry over for tenants whose limits did not change."""
        new = Admission(model_limits)
        new.carry_over(self.policy, unchanged_tenants)
        self.policy = new
