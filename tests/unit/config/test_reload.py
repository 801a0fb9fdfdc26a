"""The Reloader: a supervised file watcher, and reloads asked for through the admin API
fanned out to the other processes serving the file."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.config.reload import ADMIN, Reloader
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


def test_only_an_admin_reload_fans_out(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(BASE)
    versions: list[int] = []
    reloader = Reloader(path, BASE, lambda config, version, digest: versions.append(version))
    fanned: list[int] = []
    reloader.fan_out = lambda: fanned.append(reloader.status.version)
    path.write_text(BASE.replace("16", "8"))
    assert reloader.reload("SIGHUP")
    assert reloader.reload("file changed")
    assert fanned == []
    path.write_text(BASE.replace("16", "4"))
    assert reloader.reload(ADMIN)
    path.write_text("gateway: {default_max_tokens: -1}\n")  # refused here: the others try too
    assert not reloader.reload(ADMIN)
    assert (versions, fanned) == ([2, 3], [3, 3])
