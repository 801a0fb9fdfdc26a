"""A worker's metrics channel to its siblings (`shardgate gateway --workers N`).

Each worker serves its own exposition on a Unix socket in the workers' private runtime
directory. The worker a /metrics scrape reaches fetches every sibling's at once, each with a
deadline, and answers with the merge. A sibling that does not answer in time (or answers
garbage) is counted and stands in with its last good exposition, so the summed counters do not
drop (which Prometheus would read as a reset); one never seen is left out. Never a 5xx.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from pathlib import Path

import aiohttp
from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric

from gateway.observability.merge import merge, parse

log = logging.getLogger(__name__)

SCRAPE_TIMEOUT_S = 1.0


class Siblings:
    """`own()` renders this worker's exposition; `sockets` are the siblings' (by index), and
    `path` is where this one serves its own. `on_unanswered()` counts a sibling skipped."""

    def __init__(
        self,
        path: Path,
        sockets: Mapping[int, Path],
        own: Callable[[], bytes],
        on_unanswered: Callable[[], None],
        timeout_s: float = SCRAPE_TIMEOUT_S,
        app: web.Application | None = None,
    ) -> None:
        """`app`: what else this worker answers its siblings on its socket (/metrics added)."""
        self._app = app
        self._path = path
        self._sockets = dict(sockets)
        self._own = own
        self._on_unanswered = on_unanswered
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._last: dict[int, list[Metric]] = {}
        self._sessions: dict[int, aiohttp.ClientSession] = {}
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application() if self._app is None else self._app
        app.router.add_get("/metrics", self._serve)
        # (A sibling that leaves a forwarded stream cancels its handler here.)
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, handler_cancellation=True
        )
        await self._runner.setup()
        self._path.unlink(missing_ok=True)  # a socket left by a worker that was killed
        await web.UnixSite(self._runner, str(self._path)).start()
        self._sessions = {
            i: aiohttp.ClientSession(
                connector=aiohttp.UnixConnector(path=str(p)), timeout=self._timeout
            )
            for i, p in self._sockets.items()
        }

    async def stop(self) -> None:
        sessions, self._sessions = self._sessions, {}
        for s in sessions.values():
            await s.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self._path.unlink(missing_ok=True)

    async def _serve(self, request: web.Request) -> web.Response:
        resp = web.Response(body=self._own())
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    async def _fetch(self, index: int, session: aiohttp.ClientSession) -> list[Metric] | None:
        try:
            async with session.get("http://worker/metrics") as resp:
                if resp.status != 200:
                    return None
                return parse(await resp.text())
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            log.debug("worker %d did not answer a metrics scrape: %r", index, e)
            return None

    async def scrape(self) -> bytes:
        """This worker's exposition merged with every sibling's."""
        indices = list(self._sessions)
        got = await asyncio.gather(*(self._fetch(i, self._sessions[i]) for i in indices))
        parts: list[list[Metric]] = []
        for i, families in zip(indices, got, strict=True):
            if families is None:
                self._on_unanswered()
                families = self._last.get(i)
            else:
                self._last[i] = families
            if families is not None:
                parts.append(families)
        return merge([parse(self._own().decode()), *parts])
