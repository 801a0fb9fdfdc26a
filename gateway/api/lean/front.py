"""What every lean connection shares: the limits, the handler, the way to aiohttp, and the
open connections themselves (stopped gracefully with aiohttp's: gateway/api/http_server.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from gateway.api.edge import Edge
from gateway.api.lean.head import HeadLimits
from gateway.config.schema import GatewaySettings

if TYPE_CHECKING:
    from gateway.api.lean.exchange import LeanExchange
    from gateway.api.lean.protocol import LeanProtocol

__all__ = ["LeanFront", "TakeOver"]


class TakeOver(Protocol):
    """aiohttp's protocol for a connection, taking it over from a lean one (http_server.py)."""

    def take_over(
        self, transport: asyncio.Transport, data: bytes, head_since: float, paused: bool
    ) -> None: ...


class LeanFront:
    __slots__ = (
        "conns",
        "draining",
        "edge",
        "keepalive_s",
        "limits",
        "make_edge",
        "serve",
        "settings",
    )

    def __init__(
        self,
        edge: Edge,
        limits: HeadLimits,
        keepalive_s: float,
        serve: Callable[[LeanExchange], Coroutine[Any, Any, None]],
        settings: Callable[[], GatewaySettings],
    ) -> None:
        self.edge = edge
        self.limits = limits
        self.keepalive_s = keepalive_s
        self.serve = serve
        self.settings = settings  # (the body timeout reloads)
        self.make_edge: Callable[[], TakeOver] | None = None  # set by the server
        self.conns: set[LeanProtocol] = set()
        self.draining = False

    def pre_shutdown(self) -> None:
        """No new request: idle connections close now, the others after their answer."""
        self.draining = True
        for conn in list(self.conns):
            conn.drain()

    async def shutdown(self, grace_s: float | None) -> None:
        """Answers in flight get `grace_s` to finish; then their handlers are cancelled and
        get as long again to end; then every connection closes."""
        tasks = {c.task for c in self.conns if c.task is not None}
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace_s)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=grace_s)
        for conn in list(self.conns):
            conn.close()
