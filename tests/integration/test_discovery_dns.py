"""DNS discovery with a resolver the test controls, real sim sidecars behind the answers."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any, cast

import dns.message
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import pytest

from engine_sidecar.backends.sim import SimConfig
from engine_sidecar.config import SidecarConfig
from engine_sidecar.server import Sidecar
from gateway.app import Gateway
from gateway.config.loader import parse
from gateway.discovery.dns import getaddrinfo
from gateway.discovery.runner import ErrorKind
from gateway.discovery.srv import srv_resolver
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
            return {r.head for r in fleet.assembly.pool("sim-llama") if r.routable}

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


class SrvServer(asyncio.DatagramProtocol):
    """A DNS server on 127.0.0.1 (UDP) answering SRV queries from `records` (target, port);
    NXDOMAIN while `records` is None."""

    def __init__(self) -> None:
        self.records: list[tuple[str, int]] | None = []
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        query = dns.message.from_wire(data)
        reply = dns.message.make_response(query)
        (question,) = query.question
        if self.records is None:
            reply.set_rcode(dns.rcode.NXDOMAIN)
        else:
            rrset = reply.find_rrset(
                reply.answer, question.name, dns.rdataclass.IN, dns.rdatatype.SRV, create=True
            )
            rrset.update_ttl(5)
            for target, port in self.records:
                rrset.add(
                    dns.rdata.from_text(
                        dns.rdataclass.IN, dns.rdatatype.SRV, f"0 10 {port} {target}."
                    )
                )
        assert self.transport is not None
        self.transport.sendto(reply.to_wire(), addr)


async def test_srv_names_give_each_sidecar_its_host_and_port(sidecars: list[Sidecar]) -> None:
    loop = asyncio.get_running_loop()
    server = SrvServer()
    transport, _ = await loop.create_datagram_endpoint(lambda: server, local_addr=("127.0.0.1", 0))
    try:
        resolve = srv_resolver(transport.get_extra_info("sockname"))
        srv = "_grpc._tcp.shardgate-sidecar.shard.svc.cluster.local"
        server.records = [("localhost", s.port) for s in sidecars]
        assert await resolve(srv, 0) == sorted(("localhost", s.port) for s in sidecars)
        server.records = None
        with pytest.raises(OSError, match="does not exist"):
            await resolve(srv, 0)

        server.records = [("127.0.0.1", sidecars[0].port)]
        text = f"discovery: {{mode: dns, dns: {{name: {srv}, srv: true, interval_s: 0.05}}}}\n"
        gw = Gateway(parse(text), http_port=0, grpc_port=0, resolver=resolve)
        await gw.start()
        try:
            want = {f"127.0.0.1:{sidecars[0].port}"}
            await until_async(lambda: set(gw.fleet.by_name) == want, what="the SRV target")
            await until_async(lambda: all(lk.routable for lk in gw.fleet.links), what="up")
        finally:
            await gw.stop(1.0)
    finally:
        transport.close()
