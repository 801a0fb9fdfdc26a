"""The owner of streams whose client left: their producers run on here, for a reader to
reattach within the grace, and are cancelled and awaited when the gateway stops."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from gateway import tasks

log = logging.getLogger(__name__)


class Detached:
    __slots__ = ("_tasks",)

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def adopt(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("detached stream %s failed", task.get_name(), exc_info=task.exception())

    async def close(self) -> None:
        await tasks.stop_all(set(self._tasks))
