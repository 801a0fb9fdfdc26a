"""Shared admission against a real redis-server: two instances, one set of buckets and leases;
a slow or cancelled call; recovery."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis

from gateway.config.schema import RedisConfig
from gateway.policy.admission import Admitted, Rejected
from gateway.policy.breaker import BreakerState
from gateway.policy.tenants import Limits, Tenant
from gateway.runtime.admitter import Ticket
from gateway.shared_limits.admission import SharedAdmission, SharedTicket
from gateway.shared_limits.keys import tenant_keys
from gateway.tasks import stop_all
from tests.integration.poll import until_async
from tests.ports import free_port
from tests.redis_server import RedisServer

_PREFIXES = itertools.count()
Make = Callable[..., Awaitable[SharedAdmission]]


@pytest.fixture
async def make(redis_server: RedisServer) -> AsyncIterator[Make]:
    """Started instances on one fresh key prefix; closed at the end."""
    prefix = f"t{next(_PREFIXES)}"
    made: list[SharedAdmission] = []

    async def _make(timeout_ms: int = 500, **kw: object) -> SharedAdmission:
        cfg = RedisConfig(url=redis_server.url, key_prefix=prefix, timeout_ms=timeout_ms)
        a = SharedAdmission(cfg, **kw)  # type: ignore[arg-type]
        await a.start()
        made.append(a)
        return a

    yield _make
    for a in made:
        await a.close()


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:
    r = Redis.from_url(redis_server.url)
    yield r
    await r.aclose()


def tenant(**limits: object) -> Tenant:
    return Tenant("acme", defaults=Limits(**limits))  # type: ignore[arg-type]


def header(r: Ticket | Rejected, name: str) -> str:
    return dict(r.headers)[name]


async def test_two_instances_share_one_requests_bucket(make: Make) -> None:
    a, b = await make(), await make()
    t = tenant(requests_per_s=0.1, requests_burst=5)
    results = [await (a, b)[i % 2].reserve(t, "m", 1, 0.0) for i in range(40)]
    admitted = [r for r in results if not isinstance(r, Rejected)]
    assert 5 <= len(admitted) <= 6
    assert all(isinstance(r, SharedTicket) for r in admitted)
    refused = results[-1]
    assert isinstance(refused, Rejected) and refused.status == 429
    assert refused.reason == "requests per second exceeded"
    assert refused.retry_after_s is not None and 0 < refused.retry_after_s <= 10.0
    assert header(refused, "x-ratelimit-limit-requests") == "5"
    assert header(refused, "x-ratelimit-remaining-requests") == "0"
    assert header(refused, "retry-after") in ("9", "10")


async def test_tokens_are_refunded_and_charged_after_the_fact(make: Make) -> None:
    a, b = await make(), await make()
    t = tenant(tokens_per_min=6, tokens_burst=100)  # 0.1 token/s: no refill to speak of
    first = await a.reserve(t, "m", 60, 0.0)
    assert isinstance(first, SharedTicket)
    assert header(first, "x-ratelimit-remaining-tokens") == "40"
    assert isinstance(await b.reserve(t, "m", 80, 0.0), Rejected)
    a.complete(first, 10, 0.0)  # 50 of the 60 given back, off the request path
    await until_async(a.settled, what="the refund sent")
    second = await b.reserve(t, "m", 80, 0.0)
    assert isinstance(second, SharedTicket)
    b.complete(second, 130, 0.0)  # 50 more than reserved: a debt
    await until_async(b.settled, what="the excess charged")
    refused = await a.reserve(t, "m", 1, 0.0)
    assert isinstance(refused, Rejected) and refused.tokens
    assert refused.reason == "tokens per minute exceeded"
    # 40 left, -50 of debt: 11 tokens short of 1 at 0.1/s.
    assert refused.retry_after_s is not None and refused.retry_after_s > 100
    too_large = await a.reserve(t, "m", 101, 0.0)
    assert isinstance(too_large, Rejected) and too_large.retry_after_s is None


async def test_concurrency_is_shared_and_freed(make: Make, redis: Redis) -> None:
    a, b = await make(), await make()
    t = tenant(max_concurrent=2)
    one, two = await a.reserve(t, "m", 1, 0.0), await b.reserve(t, "m", 1, 0.0)
    assert isinstance(one, SharedTicket) and isinstance(two, SharedTicket)
    third = await a.reserve(t, "m", 1, 0.0)
    assert isinstance(third, Rejected)
    assert third.reason == "too many concurrent requests (limit 2)"
    b.complete(two, 1, 0.0)
    await until_async(b.settled, what="the lease dropped")
    assert isinstance(await a.reserve(t, "m", 1, 0.0), SharedTicket)


async def test_a_dead_instances_leases_expire(make: Make, redis: Redis) -> None:
    t = tenant(max_concurrent=1)
    dead = await make(lease_ttl_ms=300, maintain_every_s=0.05)
    live = await make(lease_ttl_ms=300, maintain_every_s=0.05)
    assert isinstance(await live.reserve(t, "m", 1, 0.0), SharedTicket)
    lease_key = tenant_keys(dead.config.key_prefix, "acme", "m")[2]
    (_, score), *_ = await redis.zrange(lease_key, 0, 0, withscores=True)

    clock = SyncRedis.from_url(dead.config.url)

    def now_ms() -> float:  # Redis's clock, which the leases use
        s, us = clock.time()
        return float(s * 1000 + us / 1000)

    async def past(ms: float) -> None:
        await until_async(lambda: now_ms() >= ms, what="Redis's clock past the lease")

    await past(score + 300)  # the live instance refreshed its lease: still held
    assert isinstance(await dead.reserve(t, "m", 1, 0.0), Rejected)
    await stop_all(live._tasks)  # the instance dies: no refresh, no settlement
    await past(now_ms() + 300)
    assert isinstance(await dead.reserve(t, "m", 1, 0.0), SharedTicket)
    clock.close()


async def test_a_cancelled_caller_leaves_nothing_behind(make: Make, redis: Redis) -> None:
    """The caller goes away while Redis is busy: its cancellation propagates at once, the
    call reads its reply, and what it reserved is given back."""
    a = await make(timeout_ms=5000)
    t = tenant(requests_per_s=0.1, requests_burst=2, max_concurrent=1)
    sleeper = Redis.from_url(a.config.url)
    await sleeper.ping()  # connected: the next command leaves at once
    busy = asyncio.create_task(sleeper.execute_command("DEBUG", "SLEEP", "0.3"))
    await until_async(lambda: sleeper.connection_pool._in_use_connections, what="DEBUG SLEEP sent")
    caller = asyncio.create_task(a.reserve(t, "m", 1, 0.0))
    assert a._store is not None
    pool = a._store.client.connection_pool  # type: ignore[attr-defined]
    await until_async(lambda: pool._in_use_connections, what="the reserve call sent")
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert not busy.done()  # the caller did not wait for Redis
    await busy
    await sleeper.aclose()
    store = a._store
    # The reserve call ends after DEBUG SLEEP does; what it reserved is then given back.
    await until_async(
        lambda: store.idle() and a.settled(), what="the abandoned reservation given back"
    )
    # The call read its reply: its connection went back to the pool still open.
    idle = pool._available_connections
    assert idle and all(c.is_connected for c in idle)
    _, _, cc = tenant_keys(a.config.key_prefix, "acme", "m")
    assert await redis.zcard(cc) == 0
    first = await a.reserve(t, "m", 1, 0.0)
    assert isinstance(first, SharedTicket)
    assert header(first, "x-ratelimit-remaining-requests") == "1"  # the burst is whole again
    assert a.breaker.state is BreakerState.CLOSED


async def test_a_slow_redis_is_left_to_the_fallback_then_used_again(make: Make) -> None:
    """Calls past timeout_ms fall back (limit / live instances, here 2: the burst of 4 is 2
    each); three in a row open the breaker; Redis answering again closes it."""
    a = await make(timeout_ms=50)
    await make(timeout_ms=50)  # a second instance: limits / 2 in fallback
    await a.maintain()
    assert a.live == 2
    t = tenant(requests_per_s=0.01, requests_burst=4)
    sleeper = Redis.from_url(a.config.url)
    await sleeper.ping()
    busy = asyncio.create_task(sleeper.execute_command("DEBUG", "SLEEP", "0.5"))
    await until_async(lambda: sleeper.connection_pool._in_use_connections, what="DEBUG SLEEP sent")
    results = [await a.reserve(t, "m", 1, 0.0) for _ in range(4)]
    assert not busy.done()  # every answer came while Redis was asleep
    assert [type(r) for r in results] == [Admitted, Admitted, Rejected, Rejected]
    assert a.breaker.state is BreakerState.OPEN
    await busy
    await sleeper.aclose()
    # Half-open after 0.5 s: the next call (a request's, or the heartbeat's) is the probe.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    probe = await a.reserve(t, "m", 1, 0.0)
    while not isinstance(probe, SharedTicket):
        assert loop.time() < deadline, "not back on Redis"
        await asyncio.sleep(0.05)
        probe = await a.reserve(t, "m", 1, 0.0)
    assert a.breaker.state is BreakerState.CLOSED


async def test_scripts_are_loaded_again_after_a_flush(make: Make, redis: Redis) -> None:
    """A restarted or flushed Redis answers NOSCRIPT: the reserve call and the pipelined
    settlements are sent again with the script's source."""
    a = await make()
    t = tenant(max_concurrent=1, tokens_per_min=6, tokens_burst=100)
    first = await a.reserve(t, "m", 50, 0.0)
    assert isinstance(first, SharedTicket)
    await redis.script_flush()
    refused = await a.reserve(t, "m", 1, 0.0)  # reserve: EVALSHA, NOSCRIPT, EVAL
    assert isinstance(refused, Rejected)
    await redis.script_flush()
    a.complete(first, 10, 0.0)  # settle: a pipeline of EVALSHA, NOSCRIPT, EVAL
    await until_async(a.settled, what="settled")
    again = await a.reserve(t, "m", 80, 0.0)  # the lease dropped, 40 tokens refunded
    assert isinstance(again, SharedTicket)
    assert a.breaker.state is BreakerState.CLOSED


async def test_redis_never_reached_splits_by_this_gateways_workers() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    a = SharedAdmission(RedisConfig(url=url, timeout_ms=200), workers=3)
    await a.start()
    try:
        t = tenant(requests_per_s=0.01, requests_burst=6)
        results = [await a.reserve(t, "m", 1, 0.0) for _ in range(6)]
        assert [type(r) for r in results] == [Admitted] * 2 + [Rejected] * 4  # 6 / 3 workers
    finally:
        await a.close()
