"""Workers' metrics over their private Unix sockets: one scrape merges every sibling's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from aiohttp import web

from gateway.observability import GatewayMetrics, Outcome
from gateway.observability.siblings import Siblings
from tests.unit.observability._scrape import parse, value

OK = {"model": "m", "outcome": "ok", "class": "0"}


def seat(tmp: Path, index: int, of: int, metrics: GatewayMetrics) -> Siblings:
    sockets = {i: tmp / f"w{i}.sock" for i in range(of) if i != index}
    own: Callable[[], bytes] = lambda: metrics.render()[0]  # noqa: E731
    return Siblings(tmp / f"w{index}.sock", sockets, own, metrics.sibling_unanswered, 0.5)


def done(m: GatewayMetrics, n: int) -> None:
    for _ in range(n):
        m.request_done("m", "anonymous", 0, Outcome.OK, 0.1, 0.2, 1, 1)


@pytest.fixture
async def odd_sibling(tmp_path: Path) -> AsyncIterator[asyncio.Event]:
    """Worker 3 answers garbage, worker 4 never answers; 2 has no socket at all."""
    never = asyncio.Event()

    async def garbage(request: web.Request) -> web.Response:
        return web.Response(text="{not metrics")

    async def hang(request: web.Request) -> web.Response:
        await never.wait()
        return web.Response()

    runners = []
    for index, handler in ((3, garbage), (4, hang)):
        app = web.Application()
        app.router.add_get("/metrics", handler)
        runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
        await runner.setup()
        await web.UnixSite(runner, str(tmp_path / f"w{index}.sock")).start()
        runners.append(runner)
    yield never
    never.set()
    for r in runners:
        await r.cleanup()


async def test_one_scrape_has_every_workers_totals(
    tmp_path: Path, odd_sibling: asyncio.Event
) -> None:
    ma, mb = GatewayMetrics(models=["m"]), GatewayMetrics(models=["m"])
    a, b = seat(tmp_path, 0, 5, ma), seat(tmp_path, 1, 5, mb)
    await a.start()
    await b.start()
    try:
        done(ma, 2)
        done(mb, 3)
        s = parse(await a.scrape())
        assert value(s, "shardgate_requests_total", **OK) == 5
        # 2, 3 and 4 did not answer: counted by the worker that was scraped.
        assert value(s, "shardgate_worker_scrape_failures_total") == 3
        assert value(parse(await b.scrape()), "shardgate_requests_total", **OK) == 5

        done(ma, 1)
        await b.stop()  # b's last exposition stands in: the total does not drop
        s = parse(await a.scrape())
        assert value(s, "shardgate_requests_total", **OK) == 6
        assert value(s, "shardgate_worker_scrape_failures_total") == 7
    finally:
        await a.stop()
        await b.stop()
    assert not (tmp_path / "w0.sock").exists()
