"""Transactional config reload: read, validate everything, build, swap one reference.

A file that fails anywhere changes nothing: the config in force keeps serving, and the error
(naming the field and line) is kept for /admin/config, logged, and counted in a metric.
Triggers: the file changing on disk (polled), SIGHUP, and POST /admin/reload; each logs one
line, also when the file is unchanged. A good reload clears the error of a refused one.

The config's hash is that of the file's text (`text_hash`), in /admin/config and in the metric
`shardgate_config_info{hash}` alike; a config given without a file (built in code, or parsed
from a string) hashes its JSON encoding, the text `--config-json` would carry (`config_hash`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from gateway import tasks
from gateway.config.loader import ConfigError, parse
from gateway.config.offset import moved
from gateway.config.schema import Config

log = logging.getLogger(__name__)

ADMIN = "admin"  # the trigger of POST /admin/reload


@dataclass(slots=True)
class ReloadStatus:
    path: str
    version: int
    hash: str
    loaded_at: float  # unix time
    last_error: str | None = None
    last_error_at: float | None = None


# What a running gateway reads at start only (besides its edge's, named by the caller).
RESTART_ONLY_GATEWAY = (
    "http",
    "grpc",
    "max_body_bytes",
    "streams",
    "lean_http",
    "malloc_mmap_threshold_bytes",
)
RESTART_ONLY = ("redis", "discovery")


def restart_only_change(old: Config, new: Config, edge: Sequence[str] = ()) -> str | None:
    """The first setting `new` changes that only a restart can (None: none); `edge`: more
    `gateway` fields the caller reads at start only."""
    for name in (*RESTART_ONLY_GATEWAY, *edge):
        if getattr(new.gateway, name) != getattr(old.gateway, name):
            return f"gateway.{name}"
    for name in RESTART_ONLY:
        if getattr(new, name) != getattr(old, name):
            return name
    if new.store_config() != old.store_config():  # (`admin:` alone brings the default store)
        return "store"
    return None


def text_hash(text: str) -> str:
    """The hash of a config file's text: the one /admin/config and the metric show."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def config_hash(config: Config) -> str:
    """The hash of a config given without a file: that of its JSON text."""
    return text_hash(msgspec.json.encode(config).decode())


class Reloader:
    """Owns the config file. `apply(new)` builds the new components and swaps them in; it must
    raise (ValueError, ConfigError) before changing anything when the config cannot apply.
    `port_offset`: what the file's ports are moved by (gateway/config/offset.py), as they were
    at start."""

    def __init__(
        self,
        path: str | Path,
        text: str,
        apply: Callable[[Config, int, str], None],
        on_failure: Callable[[], None] | None = None,
        validate: Callable[[Config], None] | None = None,
        port_offset: int = 0,
    ) -> None:
        self.path = Path(path)
        self.port_offset = port_offset
        self._apply = apply
        self._on_failure = on_failure
        self._validate = validate
        self.status = ReloadStatus(str(self.path), 1, text_hash(text), time.time())
        # Called after a reload asked through the admin API, so that every other process
        # serving the same file loads it too (gateway/workers.py); None: this one only.
        self.fan_out: Callable[[], None] | None = None
        self._stamp = self._file_stamp()
        self._task: asyncio.Task[None] | None = None

    def _file_stamp(self) -> tuple[float, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime, st.st_size)

    def reload(self, trigger: str) -> bool:
        """Load the file again; True when the new config is in force (or unchanged)."""
        try:
            return self._reload(trigger)
        finally:
            if trigger == ADMIN and self.fan_out is not None:
                self.fan_out()

    def _reload(self, trigger: str) -> bool:
        self._stamp = self._file_stamp()
        try:
            text = self.path.read_text()
        except OSError as e:
            return self._failed(trigger, f"{self.path}: {e.strerror}")
        digest = text_hash(text)
        if digest == self.status.hash:
            self._clear_error()
            log.info("config unchanged (hash %s): %s", digest, trigger)
            return True
        try:
            config = moved(parse(text, str(self.path)), self.port_offset)
            if self._validate is not None:
                self._validate(config)
            self._apply(config, self.status.version + 1, digest)
        except (ConfigError, ValueError) as e:
            return self._failed(trigger, str(e))
        self.status.version += 1
        self.status.hash = digest
        self.status.loaded_at = time.time()
        self._clear_error()
        log.info("config reloaded (%s): version %d, hash %s", trigger, self.status.version, digest)
        return True

    def _clear_error(self) -> None:
        """The file in force is the file on disk: an earlier refusal is history."""
        self.status.last_error = None
        self.status.last_error_at = None

    def _failed(self, trigger: str, error: str) -> bool:
        self.status.last_error = error
        self.status.last_error_at = time.time()
        log.error("config reload (%s) refused; the previous config stays: %s", trigger, error)
        if self._on_failure is not None:
            self._on_failure()
        return False

    # -- watching the file -------------------------------------------------------------------
    def watch(self, interval_s: float = 1.0) -> None:
        self._task = asyncio.create_task(self._watch(interval_s), name="config-watch")

    async def close(self) -> None:
        task, self._task = self._task, None
        await tasks.stop(task)

    async def _watch(self, interval_s: float) -> None:
        """Supervised: a failure in one check is logged and the next check runs as usual."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                stamp = self._file_stamp()
                if stamp is not None and stamp != self._stamp:
                    self.reload("file changed")
            except Exception:
                log.exception("config watch: checking %s failed; watching on", self.path)
