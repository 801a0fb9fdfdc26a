"""Owned background tasks: cancel and wait for them, never leave them running."""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger(__name__)


async def stop(task: asyncio.Task[None] | None) -> None:
    """Cancel `task` and wait until it has ended.

    Its own cancellation ends here; the caller's does not: when the task that awaits is itself
    being cancelled, CancelledError propagates. What the task raised otherwise is logged (it is
    being stopped: nobody else will read it)."""
    if task is None:
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
    except Exception:
        log.warning("task %s failed before it was stopped", task.get_name(), exc_info=True)


async def stop_all(tasks: list[asyncio.Task[None]] | set[asyncio.Task[None]]) -> None:
    """`stop` each of `tasks`: all are cancelled first, then awaited."""
    for task in tasks:
        task.cancel()
    for task in list(tasks):
        await stop(task)
