"""DNS discovery with a resolver the test controls, real sim sidecars behind the answers."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from engine_sidecar.backends.sim import SimConfig
from engine_sidecar.config import SidecarConfig
from engine_sidecar.server import Sidecar
from gateway.app import Gateway
from gateway.config.loader import parse
from gateway.discovery.dns import getaddrinfo
from gateway.discovery.runner import ErrorKind
from tests.integration.poll import until_async

SIM = SimConfig(model="sim-llama", profile="fast")
NAME = "shardgate-sidecar.shard.svc.cluster.local"
YAML = f"""
gateway: {{default_max_tokens: 8, drain_timeout_s: 20}}
discovery: {{mode: dns, dns: {{name: {NAME}, port: 50061, interval_s: 0.05, timeout_s: 0.2}}}}
"""


class Resolver:
    """Answers what the test says: addresses, an error, or nothing at all (a hang)."""

    def __init__(self) -> None:
        self.answer: list[tuple[str, int]] = []
        self.error: OSError | None = None
        self.hang = False
        self.asked: list[tuple[str, int]] = []

    async def __call__(self, name: str, port: int) -> list[tuple[str, int]]:
        self.asked.append((name, port))
        if self.hang:
            await asyncio.Event().wait()
        if self.error is not None:
            raise self.error
        return list(self.answer)


@pytest.fixture
async def sidecars() -> AsyncIterator[list[Sidecar]]:
    out = []
    for i in range(2):
        s = Sidecar(SidecarConfig(name=f"sim-{i}", port=0, heartbeat_interval_s=0.1, sim=SIM))
        await s.start()
        out.append(s)
    yield out
    for s in out:
        await s.stop(0.2)


async def test_dns_discovery_follows_the_answers_and_keeps_the_set_on_failures(
    sidecars: list[Sidecar],
) -> None:
    resolver = Resolver()
    a, b = (f"127.0.0.1:{s.port}" for s in sidecars)
    resolver.answer = [("127.0.0.1", sidecars[0].port)]
    gw = Gateway(parse(YAML), http_port=0, grpc_port=0, resolver=resolver)
    await gw.start()
    try:
        d = gw.discovery
        assert d is not None
        fleet = gw.fleet

        def routable() -> set[str]:
            return {n for n, link in fleet.by_name.items() if link.routable}

        await until_async(lambda: routable() == {a}, what="the first answer connected")
        assert resolver.asked[0] == (NAME, 50061)
        resolver.answer = [("127.0.0.1", s.port) for s in sidecars]
        await until_async(lambda: routable() == {a, b}, what="an added address connected")
        resolver.answer = [("127.0.0.1", sidecars[1].port)]
        await until_async(lambda: set(fleet.by_name) == {b}, what="a removed address drained")
        await until_async(lambda: not fleet.draining, what="and dropped")

        only_b = [("127.0.0.1", sidecars[1].port)]
        for fail in ("error", "hang", "empty"):  # a failed lookup, none in time, no addresses
            enough = d.errors[ErrorKind.RESOLVE] + 2
            nxdomain = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            resolver.error = nxdomain if fail == "error" else None
            resolver.hang = fail == "hang"
            resolver.answer = [] if fail == "empty" else only_b
            await until_async(lambda: d.errors[ErrorKind.RESOLVE] >= enough, what=fail)  # noqa: B023
            assert d.stale and routable() == {b}, fail  # the last set stays, marked stale
            resolver.error, resolver.hang, resolver.answer = None, False, only_b
            await until_async(lambda: not d.stale, what=f"in sync after {fail}")
        assert routable() == {b}
    finally:
        await gw.stop(1.0)


async def test_a_reload_keeps_the_discovered_sidecars(sidecars: list[Sidecar]) -> None:
    resolver = Resolver()
    resolver.answer = [("127.0.0.1", s.port) for s in sidecars]
    gw = Gateway(parse(YAML), http_port=0, grpc_port=0, resolver=resolver)
    await gw.start()
    try:
        await until_async(lambda: len(gw.fleet.by_name) == 2, what="both discovered")
        links = list(gw.fleet.links)
        gw.apply(parse(YAML.replace("default_max_tokens: 8", "default_max_tokens: 9")), 2, "ab")
        assert gw.fleet.links == links and not gw.fleet.draining
        with pytest.raises(ValueError, match="discovery changes only with a restart"):
            gw.validate(parse(YAML.replace("interval_s: 0.05", "interval_s: 1")))
    finally:
        await gw.stop(1.0)


async def test_the_default_resolver_is_the_loops_getaddrinfo() -> None:
    assert await getaddrinfo("127.0.0.1", 50061) == [("127.0.0.1", 50061)]
    with pytest.raises(socket.gaierror):
        await getaddrinfo("no-such-host.invalid", 1)
