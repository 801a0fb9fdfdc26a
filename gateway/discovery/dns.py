"""Sidecars from DNS: a headless Service's name resolved every `interval_s`, one sidecar per
address (named by its address). The resolver is injected (default: the loop's getaddrinfo);
each resolution has a deadline. A name that resolves to nothing, or not in time, is a failure:
the last set stays (DNS cannot tell a Service scaled to zero from a lookup that failed).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

from gateway.config.discovery import DnsDiscovery
from gateway.discovery.runner import ErrorKind, Sink
from gateway.policy.discovery import Member

# (name, port) -> [(host, port)]; the port is 0 for an SRV name (its records give the ports).
Resolver = Callable[[str, int], Awaitable[list[tuple[str, int]]]]


async def getaddrinfo(name: str, port: int) -> list[tuple[str, int]]:
    infos = await asyncio.get_running_loop().getaddrinfo(name, port, type=socket.SOCK_STREAM)
    return sorted({(str(sockaddr[0]), int(sockaddr[1])) for *_, sockaddr in infos})


def address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class DnsSource:
    def __init__(self, settings: DnsDiscovery, resolver: Resolver = getaddrinfo) -> None:
        self.settings = settings
        self.resolve = resolver

    async def run(self, sink: Sink) -> None:
        s = self.settings
        while True:
            try:
                async with asyncio.timeout(s.timeout_s):
                    found = await self.resolve(s.name, s.port or 0)
            except TimeoutError:
                sink.failed(ErrorKind.RESOLVE, f"{s.name}: no answer within {s.timeout_s} s")
            except (OSError, ValueError) as e:  # socket.gaierror is an OSError
                sink.failed(ErrorKind.RESOLVE, f"{s.name}: {e}")
            else:
                if found:
                    members = (address(h, p) for h, p in found)
                    sink.synced({a: Member(a, a) for a in members})
                else:
                    sink.failed(ErrorKind.RESOLVE, f"{s.name}: no addresses")
            await asyncio.sleep(s.interval_s)
