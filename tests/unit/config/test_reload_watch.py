"""The file watcher is supervised: one failing check does not end the watching."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from gateway.config.reload import Reloader
from gateway.config.schema import Config

BASE = "gateway: {default_max_tokens: 16}\n"


async def test_the_watch_survives_a_failing_reload(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(BASE)
    applied: list[int] = []

    def apply(config: Config, version: int, digest: str) -> None:
        applied.append(config.gateway.default_max_tokens)
        if len(applied) == 1:
            raise RuntimeError("a bug in building the new components")

    reloader = Reloader(path, BASE, apply)
    reloader.watch(interval_s=0.01)
    try:
        path.write_text(BASE.replace("16", "8"))
        await _until(lambda: applied == [8])
        path.write_text(BASE.replace("16", "1024"))  # another size: a new stamp
        await _until(lambda: applied == [8, 1024])
    finally:
        await reloader.close()
    assert reloader.status.version == 2


async def _until(cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not cond():
            await asyncio.sleep(0.01)
