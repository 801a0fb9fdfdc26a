"""Admission against buckets and leases shared in Redis, with a bounded local fallback.

`reserve` runs the reserve script on the tenant's keys and, when the model has `model_limits`,
on the pool's (two slots: two calls, at the same time; a part admitted while the other refused
is given back). `complete` queues the settlement; one task sends queued settlements in batches,
never on the request path. Another task heartbeats this instance (the count of live instances
divides the limits in fallback) and refreshes the leases of requests still running.

Redis slow or gone (a call past `timeout_ms`, refused, reset): the circuit breaker opens and
requests are admitted by local buckets holding `limit / live instances` (the last count seen),
rates divided and bursts and concurrency rounded up; a half-open probe (a request, a settlement
or the heartbeat) closes it again when Redis answers. See docs/scale-out.md: Shared limits (Redis).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

from gateway.config.schema import RedisConfig
from gateway.config.tenants import RateLimits
from gateway.observability.redis_metrics import RedisMetrics
from gateway.policy.admission import Admission, Admitted, Rejected
from gateway.policy.breaker import Breaker, BreakerState
from gateway.policy.split import split_rate_limits, split_tenant
from gateway.policy.tenants import Tenant, buckets
from gateway.runtime.admitter import Ticket
from gateway.shared_limits import keys, lua
from gateway.shared_limits.answer import ADMITTED, Answer, Spec, headers, verdict
from gateway.shared_limits.store import UNAVAILABLE, Client, Script, Store, connect
from gateway.tasks import stop_all

log = logging.getLogger(__name__)

# A lease (and an instance's heartbeat) lives this long unless refreshed: how long a dead
# gateway's requests keep their concurrency slots.
LEASE_TTL_MS: Final = 10_000
MAINTAIN_EVERY_S: Final = 2.0
MAX_QUEUED_SETTLES: Final = 10_000
SETTLE_BATCH: Final = 64

_RESERVE = Script(lua.RESERVE)
_SETTLE = Script(lua.SETTLE)
_REFRESH = Script(lua.REFRESH)
_HEARTBEAT = Script(lua.HEARTBEAT)


@dataclass(frozen=True, slots=True)
class _Part:
    keys: tuple[str, str, str]
    spec: Spec
    lease: str  # "" when the part has no concurrency limit


@dataclass(frozen=True, slots=True)
class _Settle:
    part: _Part
    delta: int  # tokens: > 0 charge the excess, < 0 refund
    whole: bool  # give the request back too (a reservation undone)


class SharedTicket:
    __slots__ = ("_open", "charged", "headers", "parts")

    def __init__(self, charged: int, hs: tuple[tuple[str, str], ...], parts: Sequence[_Part]):
        self.charged = charged
        self.headers = hs
        self.parts = tuple(parts)
        self._open = True


def _tenant_spec(tenant: Tenant, model: str) -> Spec:
    lim = tenant.limits(model)
    return Spec(
        lim.requests_per_s,
        lim.requests_burst,
        lim.tokens_per_min,
        lim.tokens_burst,
        lim.max_concurrent,
    )


def _pool_specs(model_limits: Mapping[str, RateLimits]) -> dict[str, Spec]:
    out = {}
    for model, c in model_limits.items():
        b = buckets(c)
        out[model] = Spec(b.requests_per_s, b.requests_burst, b.tokens_per_min, b.tokens_burst)
    return out


async def _all(calls: Sequence[Coroutine[Any, Any, Any]]) -> list[Any]:
    """Every call's reply; when one failed, raises it once all have ended."""
    replies = await asyncio.gather(*calls, return_exceptions=True)
    for r in replies:
        if isinstance(r, BaseException):
            raise r
    return replies


class SharedAdmission:
    def __init__(
        self,
        config: RedisConfig,
        model_limits: Mapping[str, RateLimits] | None = None,
        metrics: RedisMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        connector: Callable[[str, float], Client] = connect,
        lease_ttl_ms: int = LEASE_TTL_MS,
        maintain_every_s: float = MAINTAIN_EVERY_S,
        workers: int = 1,
    ) -> None:
        """`workers`: this gateway's worker processes, the fallback's divisor at least (all
        the more before Redis was ever reached)."""
        self.config = config
        self.lease_ttl_ms = lease_ttl_ms
        self.maintain_every_s = maintain_every_s
        self.instance = uuid.uuid4().hex[:16]
        self.breaker = Breaker()
        self.workers = max(1, workers)
        self.live = self.workers  # instances alive, as last counted
        self._prefix = config.key_prefix
        self._timeout_s = config.timeout_ms / 1000
        self._metrics = metrics
        self._clock = clock
        self._connector = connector
        self._model_limits = dict(model_limits or {})
        self._pools = _pool_specs(self._model_limits)
        self._store: Store | None = None
        self._settles: asyncio.Queue[_Settle] = asyncio.Queue(MAX_QUEUED_SETTLES)
        self._leases: dict[str, set[str]] = {}
        self._seq = itertools.count()
        self._fallback_n = 1
        self._fallback = Admission(self._model_limits)
        self._split: dict[str, tuple[Tenant, Tenant]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._sending = 0  # settlements in the batch being sent
        if metrics is not None:
            metrics.register_state(lambda: int(self.breaker.state))

    # -- lifecycle --------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect (inside the serving loop) and count the live instances; Redis being away
        is no error: requests start in fallback."""
        observe = self._metrics.round_trip if self._metrics is not None else None
        client = self._connector(self.config.url, self._timeout_s)
        self._store = Store(client, self._timeout_s, observe)
        await self.maintain()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._maintainer(), name="redis-maintain"),
            loop.create_task(self._settler(), name="redis-settle"),
        ]

    async def close(self) -> None:
        """Stop the tasks, send what is queued once, leave the instance count."""
        await stop_all(self._tasks)
        self._tasks = []
        store = self._store
        if store is None:
            return
        self._store = None
        batch = [self._settles.get_nowait() for _ in range(self._settles.qsize())]
        key = keys.instances_key(self._prefix)
        try:
            if batch:
                await store.run("settle", self._settle_batch(store, batch))
            await store.run("heartbeat", _HEARTBEAT(store.client, [key], [self.instance, 0]))
        except UNAVAILABLE:
            log.info("redis: could not settle or leave on close", exc_info=True)
        await store.close()

    # -- the request path -------------------------------------------------------------------
    async def reserve(
        self, tenant: Tenant, model: str, estimate: int, now: float
    ) -> Ticket | Rejected:
        spec = _tenant_spec(tenant, model)
        pool = self._pools.get(model)
        if not spec.limited and pool is None:
            return self._fallback.admit(tenant, model, estimate, now)  # nothing to share
        store = self._store
        if store is None or not self.breaker.allow(now):
            return self._local(tenant, model, estimate, now)
        tpart = ppart = None
        if spec.limited:
            lease = f"{self.instance}:{next(self._seq)}" if spec.max_concurrent else ""
            tpart = _Part(keys.tenant_keys(self._prefix, tenant.name, model), spec, lease)
        if pool is not None:
            ppart = _Part(keys.pool_keys(self._prefix, model), pool, "")
        parts = [p for p in (tpart, ppart) if p is not None]
        calls = [self._reserve_call(store, p, estimate) for p in parts]
        try:
            replies = await store.run(
                "reserve", _all(calls), partial(self._abandoned, parts, estimate)
            )
        except UNAVAILABLE:
            self._failed("reserve")
            return self._local(tenant, model, estimate, self._clock())
        self.breaker.success(self._clock())
        answers = [Answer.of(r) for r in replies]
        t = (spec, answers[0]) if tpart is not None else None
        pl = (ppart.spec, answers[-1]) if ppart is not None else None
        refused = verdict(t, pl, estimate)
        if refused is not None:
            self._undo(parts, answers, estimate)
            return refused
        if tpart is not None and tpart.lease:
            self._leases.setdefault(tpart.keys[2], set()).add(tpart.lease)
        return SharedTicket(estimate, headers(t, pl), parts)

    def complete(self, ticket: Ticket, actual_tokens: int, now: float) -> None:
        if isinstance(ticket, Admitted):
            self._fallback.complete(ticket, actual_tokens, now)
            return
        assert isinstance(ticket, SharedTicket)
        if not ticket._open:
            return
        ticket._open = False
        delta = actual_tokens - ticket.charged
        for p in ticket.parts:
            if p.lease:
                held = self._leases.get(p.keys[2])
                if held is not None:
                    held.discard(p.lease)
                    if not held:
                        del self._leases[p.keys[2]]
            if p.lease or (delta and p.spec.tokens_per_min is not None):
                self._enqueue(_Settle(p, delta, False))

    def reconfigure(
        self, model_limits: Mapping[str, RateLimits], unchanged_tenants: Iterable[str]
    ) -> None:
        self._model_limits = dict(model_limits)
        self._pools = _pool_specs(self._model_limits)
        self._rebuild_fallback(self._fallback_n, unchanged_tenants)

    # -- fallback ---------------------------------------------------------------------------
    def _local(self, tenant: Tenant, model: str, estimate: int, now: float) -> Ticket | Rejected:
        """Admission by this instance's part of the limits while Redis is away."""
        n = self.live
        if n != self._fallback_n:
            self._rebuild_fallback(n, ())
        cached = self._split.get(tenant.name)
        if cached is None or cached[0] is not tenant:
            cached = self._split[tenant.name] = (tenant, split_tenant(tenant, n))
        out = self._fallback.admit(cached[1], model, estimate, now)
        if self._metrics is not None:
            self._metrics.fallback_admission(not isinstance(out, Rejected))
        return out

    def _rebuild_fallback(self, n: int, unchanged_tenants: Iterable[str]) -> None:
        old = self._fallback
        limits = {m: split_rate_limits(c, n) for m, c in self._model_limits.items()}
        self._fallback = Admission(limits)
        if n == self._fallback_n:
            self._fallback.carry_over(old, unchanged_tenants)
        self._fallback_n = n
        self._split.clear()

    # -- calls ------------------------------------------------------------------------------
    def _reserve_call(self, store: Store, p: _Part, estimate: int) -> Coroutine[Any, Any, Any]:
        s = p.spec
        args = (
            s.requests_ms,
            s.requests_burst,
            s.tokens_ms,
            s.tokens_burst,
            estimate,
            s.max_concurrent or 0,
            p.lease,
            self.lease_ttl_ms,
        )
        return _RESERVE(store.client, p.keys, args)

    def _settle_batch(self, store: Store, batch: Sequence[_Settle]) -> Coroutine[Any, Any, Any]:
        calls = []
        for s in batch:
            spec = s.part.spec
            rq_ms = spec.requests_ms if s.whole else 0.0
            calls.append((s.part.keys, (rq_ms, spec.tokens_ms, s.delta, s.part.lease)))
        return _SETTLE.many(store.client, calls)

    def _undo(self, parts: Sequence[_Part], answers: Sequence[Answer], estimate: int) -> None:
        for p, a in zip(parts, answers, strict=True):
            if a.code == ADMITTED:
                self._enqueue(_Settle(p, -estimate, True))

    def _abandoned(self, parts: Sequence[_Part], estimate: int, task: asyncio.Task[Any]) -> None:
        """The caller went away during its reserve call: give back whatever it was given."""
        if task.cancelled() or task.exception() is not None:
            return
        self._undo(parts, [Answer.of(r) for r in task.result()], estimate)

    def _enqueue(self, s: _Settle) -> None:
        try:
            self._settles.put_nowait(s)
        except asyncio.QueueFull:
            self._dropped(1)

    def _dropped(self, n: int) -> None:
        if self._metrics is not None:
            self._metrics.settles_dropped(n)

    def _failed(self, op: str) -> None:
        if self._metrics is not None:
            self._metrics.error(op)
        was = self.breaker.state
        self.breaker.failure(self._clock())
        if was is not BreakerState.OPEN and self.breaker.state is BreakerState.OPEN:
            log.warning("redis: unavailable, admitting by local limits / %d", self.live)

    # -- background -------------------------------------------------------------------------
    async def _settler(self) -> None:
        while True:
            try:
                await self._settle_next()
            except Exception:  # a bug here must not end settling for good
                log.exception("redis: settling failed")

    async def _settle_next(self) -> None:
        batch = [await self._settles.get()]
        while len(batch) < SETTLE_BATCH and not self._settles.empty():
            batch.append(self._settles.get_nowait())
        store = self._store
        if store is None or not self.breaker.allow(self._clock()):
            self._dropped(len(batch))  # leases expire; refunds are lost
            return
        self._sending = len(batch)
        try:
            await store.run("settle", self._settle_batch(store, batch))
        except UNAVAILABLE:
            self._failed("settle")
        else:
            self.breaker.success(self._clock())
        finally:
            self._sending = 0

    def settled(self) -> bool:
        """Nothing queued or being sent."""
        return self._settles.empty() and not self._sending

    async def _maintainer(self) -> None:
        while True:
            await asyncio.sleep(self.maintain_every_s)
            try:
                await self.maintain()
            except Exception:  # a bug here must not end the heartbeat for good
                log.exception("redis: heartbeat failed")

    async def maintain(self) -> None:
        """Heartbeat (and count the live instances), then refresh the leases still held."""
        store = self._store
        if store is None or not self.breaker.allow(self._clock()):
            return
        key = keys.instances_key(self._prefix)
        try:
            live = await store.run(
                "heartbeat", _HEARTBEAT(store.client, [key], [self.instance, self.lease_ttl_ms])
            )
            self.live = max(self.workers, int(live))
            for lease_key, ids in list(self._leases.items()):
                args = [self.lease_ttl_ms, *sorted(ids)]
                await store.run("refresh", _REFRESH(store.client, [lease_key], args))
        except UNAVAILABLE:
            self._failed("heartbeat")
        else:
            self.breaker.success(self._clock())
