"""The Reloader: a supervised file watcher, and reloads asked for through the admin API
fanned out to the other processes serving the file."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import msgspec
import pytest

from gateway.config.loader import parse
from gateway.config.reload import ADMIN, Reloader, config_hash, restart_only_change, text_hash
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


def test_each_reload_asked_logs_one_line_and_a_good_one_clears_the_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(BASE)
    reloader = Reloader(path, BASE, lambda config, version, digest: None)
    caplog.set_level(logging.INFO, logger="gateway.config.reload")
    assert reloader.reload("SIGHUP")
    assert caplog.messages == [f"config unchanged (hash {text_hash(BASE)}): SIGHUP"]
    path.write_text("gateway: {default_max_tokens: -1}\n")
    assert not reloader.reload(ADMIN)
    assert reloader.status.last_error is not None
    path.write_text(BASE)  # back to the file in force
    assert reloader.reload("file changed")
    assert (reloader.status.last_error, reloader.status.last_error_at) == (None, None)
    path.write_text("gateway: {default_max_tokens: -1}\n")
    assert not reloader.reload(ADMIN)
    path.write_text(BASE.replace("16", "8"))
    assert reloader.reload(ADMIN)
    assert (reloader.status.last_error, reloader.status.version) == (None, 2)
    assert len(caplog.messages) == 5


def test_a_config_without_a_file_hashes_its_json_text() -> None:
    config = parse(BASE)
    assert config_hash(config) == text_hash(msgspec.json.encode(config).decode())
    assert config_hash(config) == config_hash(parse(BASE.replace("16", " 16")))
    assert config_hash(config) != config_hash(parse(BASE.replace("16", "8")))
