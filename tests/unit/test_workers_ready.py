"""`shardgate up --workers N` says it is up only once every worker is ready, each asked on its
own socket (a public /readyz reaches one worker of the kernel's choosing)."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

from gateway.cluster import workers_ready
from gateway.workers import Workers


@dataclass
class Readyz:
    """A /readyz that answers 503 until `ready`, counting the times it was asked."""

    ready: bool = False
    asked: int = 0
    asked_again: asyncio.Event = field(default_factory=asyncio.Event)
    runners: list[web.AppRunner] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.asked += 1
        if self.asked >= 3:  # asked, and asked again: it was not ready
            self.asked_again.set()
        return web.Response(status=200 if self.ready else 503)

    async def serve(self, unix: Path | None = None) -> None:
        """On the Unix socket `unix`, or else on a free port on 127.0.0.1."""
        app = web.Application()
        app.router.add_get("/readyz", self.handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        self.runners.append(runner)
        if unix is not None:
            await web.UnixSite(runner, str(unix)).start()
        else:
            await web.TCPSite(runner, "127.0.0.1", 0).start()


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[tuple[Workers, Readyz, Readyz, int]]:
    pool = Workers(2, str(tmp_path / "gw.yaml"), None, None, "ERROR")
    pool.runtime_dir = tmp_path
    first, second, public = Readyz(ready=True), Readyz(), Readyz(ready=True)
    sockets = pool.sockets()
    await first.serve(sockets[0])
    await second.serve(sockets[1])
    await public.serve()
    port = public.runners[0].addresses[0][1]
    yield pool, first, second, port
    for r in (first, second, public):
        for runner in r.runners:
            await runner.cleanup()


async def test_up_waits_for_the_worker_not_yet_ready(
    setup: tuple[Workers, Readyz, Readyz, int],
) -> None:
    pool, first, second, port = setup
    waiting = asyncio.create_task(workers_ready(pool, "127.0.0.1", port, tls=False))
    await asyncio.wait_for(second.asked_again.wait(), 10)
    assert not waiting.done()
    second.ready = True
    assert await asyncio.wait_for(waiting, 10)
    assert first.asked >= 1


async def test_a_worker_never_ready_is_not_up(setup: tuple[Workers, Readyz, Readyz, int]) -> None:
    pool, _, second, port = setup
    assert not await workers_ready(pool, "127.0.0.1", port, tls=False, timeout_s=0.5)
    assert second.asked >= 1


@pytest.fixture
def exited() -> subprocess.Popen[bytes]:
    with subprocess.Popen(["true"]) as proc:
        proc.wait(10)
    return proc


async def test_a_worker_that_exited_ends_the_wait_at_once(
    setup: tuple[Workers, Readyz, Readyz, int], exited: subprocess.Popen[bytes]
) -> None:
    pool, _, _, port = setup
    pool.procs = [exited]
    # (the default wait is minutes: returning within this test's timeout is "at once")
    assert not await asyncio.wait_for(workers_ready(pool, "127.0.0.1", port, tls=False), 10)
