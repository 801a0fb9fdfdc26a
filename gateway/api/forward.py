"""`--workers N`: a reattach, retrieve or cancel that reaches a worker other than the one that
keeps its stream or response is handed to that one, over its Unix socket in the workers'
runtime directory (gateway/workers.py), and its answer streamed back as it comes.

The owner does all the checking (the tenant above all: another tenant's stream is a 404 there,
as it would be here). Every step has a deadline: getting a connection `CONNECT_TIMEOUT_S`; each
read from the owner the idle bound (a followed stream sends a keep-alive every `keepalive_s`
while it waits: twice that, and a margin, means the owner is stuck); each write to the client
`WRITE_TIMEOUT_S`, as on the direct path. One chunk is read, then written: a client that reads
slowly slows the owner's writes (and its write deadline ends it there). A client that leaves
cancels the handler here, which closes the owner's connection, which cancels the owner's handler
(its reader detaches: the stream runs on for `detach_grace_s`, for the next reattach).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from gateway.streams.owner import Owners
from gateway.types import Unavailable

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 2.0
WRITE_TIMEOUT_S = 30.0
IDLE_MARGIN_S = 5.0
# Connections to one sibling at once (each forwarded stream holds one while it is followed).
MAX_CONNECTIONS = 1024
WORKER_HEADER = "x-shardgate-worker"

# What a forwarded request carries (the owner reads nothing else of it).
REQUEST_HEADERS = ("Authorization", "Last-Event-ID", "Accept")
# What is not copied from the owner's answer: this connection's own.
_HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Transfer-Encoding",
        "Content-Length",
        "Date",
        "Server",
        WORKER_HEADER,
    )
)


class Forwarder:
    """This worker's channel to its siblings' stores: `owners` says which keeps an id,
    `sockets` where each listens (by index); `keepalive_s()` the followed streams' pace."""

    def __init__(
        self, owners: Owners, sockets: Mapping[int, Path], keepalive_s: Callable[[], float]
    ) -> None:
        self.owners = owners
        self._sockets = dict(sockets)
        self._keepalive_s = keepalive_s
        self._sessions: dict[int, aiohttp.ClientSession] = {}

    @property
    def index(self) -> int:
        return self.owners.index

    def idle_s(self) -> float:
        """The longest a read from the owner may wait."""
        return 2 * self._keepalive_s() + IDLE_MARGIN_S

    def sibling(self, ident: str, prefix: str) -> int | None:
        """The sibling that keeps `ident`, if it is one this worker can reach."""
        owner = self.owners.sibling(ident, prefix)
        return owner if owner in self._sockets else None

    def _session(self, index: int) -> aiohttp.ClientSession:
        session = self._sessions.get(index)
        if session is None or session.closed:
            connector = aiohttp.UnixConnector(path=str(self._sockets[index]), limit=MAX_CONNECTIONS)
            session = self._sessions[index] = aiohttp.ClientSession(connector=connector)
        return session

    async def close(self) -> None:
        sessions, self._sessions = self._sessions, {}
        for s in sessions.values():
            await s.close()

    @contextlib.asynccontextmanager
    async def open(
        self, index: int, method: str, path: str, headers: Mapping[str, str]
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """The owner's answer to `method path` (its head read; its body to read, each read
        within the idle bound). Unavailable (503) when the owner does not answer in time."""
        idle = self.idle_s()
        timeout = aiohttp.ClientTimeout(
            total=None, connect=CONNECT_TIMEOUT_S, sock_connect=CONNECT_TIMEOUT_S, sock_read=idle
        )
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S + idle):
                resp = await self._session(index).request(
                    method, f"http://worker{path}", headers=headers, timeout=timeout
                )
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            log.warning("worker %d did not take a forwarded %s %s: %r", index, method, path, e)
            raise Unavailable(f"Worker {index}, which keeps this, is not answering.") from e
        try:
            yield resp
        finally:
            resp.close()  # (a body not read to its end: the connection goes, the owner's
            # handler is cancelled)

    async def relay(self, request: web.Request, index: int, rid: str) -> web.StreamResponse:
        """Hand `request` to worker `index` and stream its answer back to the client."""
        headers = {h: v for h in REQUEST_HEADERS if (v := request.headers.get(h)) is not None}
        headers["x-request-id"] = rid
        path = request.rel_url.raw_path_qs
        async with self.open(index, request.method, path, headers) as up:
            copied = CIMultiDict((k, v) for k, v in up.headers.items() if k.lower() not in _HOP)
            resp = web.StreamResponse(status=up.status, reason=up.reason, headers=copied)
            async with asyncio.timeout(WRITE_TIMEOUT_S):
                await resp.prepare(request)
            try:
                async for chunk in up.content.iter_any():
                    async with asyncio.timeout(WRITE_TIMEOUT_S):
                        await resp.write(chunk)
            except (aiohttp.ClientError, TimeoutError, ConnectionError) as e:
                # The owner stopped answering, or the client reading: cut the client's
                # response short (not a clean end), as a dropped connection; it may reattach.
                log.info("forwarded %s from worker %d cut short: %r", path, index, e)
                if request.transport is not None:
                    request.transport.close()
                return resp
            async with asyncio.timeout(WRITE_TIMEOUT_S):
                await resp.write_eof()
            return resp
