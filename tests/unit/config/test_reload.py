"""The Reloader: a supervised file watcher, and reloads asked for through the admin API
fanned out to the other processes serving the file."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.config.loader import parse
from gateway.config.reload import ADMIN, Reloader, restart_only_change
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


@pytest.mark.parametrize(
    ("edit", "changed"),
    [
        ("gateway: {default_max_tokens: 8}", None),  # a reload takes it
        ("gateway: {lean_http: false}", "gateway.lean_http"),
        ("gateway: {malloc_mmap_threshold_bytes: null}", "gateway.malloc_mmap_threshold_bytes"),
        ("gateway: {keepalive_timeout_s: 9}", "gateway.keepalive_timeout_s"),  # the edge's
        ("redis: {}", "redis"),
    ],
)
def test_what_only_a_restart_changes(edit: str, changed: str | None) -> None:
    edge = ("keepalive_timeout_s",)
    assert restart_only_change(parse(BASE), parse(edit), edge) == changed
