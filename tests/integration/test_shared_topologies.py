"""Shared admission through Redis Cluster (three masters) and through Sentinel, started here
from the same redis-server binary."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator

import pytest
from redis import Redis as SyncRedis

from gateway.config.schema import RedisConfig
from gateway.config.tenants import RateLimits
from gateway.policy.admission import Rejected
from gateway.policy.breaker import BreakerState
from gateway.policy.tenants import Limits, Tenant
from gateway.shared_limits.admission import SharedAdmission, SharedTicket
from tests.integration.poll import until, until_async
from tests.redis_server import RedisServer

TENANT = Tenant("acme", defaults=Limits(requests_per_s=0.1, requests_burst=3, max_concurrent=9))
POOL = {"m": RateLimits(tokens_per_min=6, tokens_burst=1000)}


@pytest.fixture(scope="module")
def cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    nodes = []
    for i in range(3):
        d = tmp_path_factory.mktemp(f"cluster{i}")
        node = RedisServer(d, ("--cluster-enabled", "yes", "--cluster-config-file", "n.conf"))
        node.start()
        nodes.append(node)
    try:
        cli = shutil.which("redis-cli")
        if cli is None:
            pytest.skip("redis-cli is not installed")
        addresses = [f"127.0.0.1:{n.port}" for n in nodes]
        subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=30,
        )
        clients = [SyncRedis(port=n.port) for n in nodes]
        until(
            lambda: all(c.cluster("INFO")["cluster_state"] == "ok" for c in clients),
            timeout_s=30,
            what="the cluster is up",
        )
        for c in clients:
            c.close()
        yield "redis+cluster://" + ",".join(addresses)
    finally:
        for n in nodes:
            n.stop()


@pytest.fixture(scope="module")
def sentinel_url(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    d = tmp_path_factory.mktemp("sentinel")
    conf = d / "sentinel.conf"
    conf.write_text(f"sentinel monitor primary 127.0.0.1 {redis_server.port} 1\n")
    sentinel = RedisServer(d, (str(conf), "--sentinel"))
    sentinel.start()
    yield f"redis+sentinel://127.0.0.1:{sentinel.port}/primary/0"
    sentinel.stop()


@contextlib.asynccontextmanager
async def _two(url: str, prefix: str) -> AsyncIterator[list[SharedAdmission]]:
    made = [SharedAdmission(RedisConfig(url=url, key_prefix=prefix, timeout_ms=1000), POOL)]
    made.append(SharedAdmission(RedisConfig(url=url, key_prefix=prefix, timeout_ms=1000), POOL))
    for a in made:
        await a.start()
    yield made
    for a in made:
        await a.close()


async def _check(pair: list[SharedAdmission]) -> None:
    a, b = pair
    assert b.live == 2  # both heartbeats counted
    results = [await (a, b)[i % 2].reserve(TENANT, "m", 10, 0.0) for i in range(10)]
    admitted = [r for r in results if isinstance(r, SharedTicket)]
    assert len(admitted) == 3  # the tenant's burst, across both, tenant and pool keys both
    assert all(isinstance(r, Rejected) for r in results[3:])
    assert dict(admitted[-1].headers)["x-ratelimit-remaining-tokens"] == "970"  # the pool's
    for t in admitted:
        a.complete(t, 10, 0.0)
    solo = Tenant("solo", defaults=Limits(max_concurrent=1))
    held = await b.reserve(solo, "m", 1, 0.0)
    assert isinstance(held, SharedTicket)
    assert isinstance(await a.reserve(solo, "m", 1, 0.0), Rejected)
    b.complete(held, 1, 0.0)
    await until_async(b.settled, what="the lease dropped")
    assert isinstance(await a.reserve(solo, "m", 1, 0.0), SharedTicket)
    assert a.breaker.state is BreakerState.CLOSED and b.breaker.state is BreakerState.CLOSED


async def test_redis_cluster(cluster_url: str) -> None:
    async with _two(cluster_url, "c") as pair:
        await _check(pair)


async def test_sentinel(sentinel_url: str) -> None:
    async with _two(sentinel_url, "s") as pair:
        await _check(pair)
