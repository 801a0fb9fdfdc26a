"""Owned background tasks: cancel and wait for them, never leave them running."""

from __future__ import annotations

import asyncio
import contextlib


async def stop(task: asyncio.Task[None] | None) -> None:
    """Cancel `task` and wait until it has ended (its cancellation is not re-raised here)."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
