"""The file watcher is supervised: one failing check does not end the watching."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.config.reload import Reloader
from gateway.config.schema import Config

BASE = "gateway: {default_max_tokens: 16}\n"


async def test_the_watch_survives_a_failing_reload(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(BASE)
    applied: asyncio.Queue[int] = asyncio.Queue()

    def apply(config: Config, version: int, digest: str) -> None:
        applied.put_nowait(config.gateway.default_max_tokens)
        if config.gateway.default_max_tokens == 8:
            raise RuntimeError("a bug in building the new components")

    reloader = Reloader(path, BASE, apply)
    reloader.watch(interval_s=0.01)
    try:
        path.write_text(BASE.replace("16", "8"))
        assert await asyncio.wait_for(applied.get(), 10) == 8
        path.write_text(BASE.replace("16", "1024"))  # another size: a new stamp
        assert await asyncio.wait_for(applied.get(), 10) == 1024
    finally:
        await reloader.close()
    assert reloader.status.version == 2
