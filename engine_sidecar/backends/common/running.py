"""The requests a backend runs as tasks of its own (one per request, each with its Usage), and
how they end when the backend stops."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Protocol

from engine_sidecar.backend import DeltaSink, Finish
from engine_sidecar.backends.common.batcher import StepBatcher
from engine_sidecar.backends.common.usage import Usage


class Running(Protocol):
    @property
    def usage(self) -> Usage: ...


async def end_all(
    requests: Mapping[int, tuple[asyncio.Task[None], Running]],
    cancelled: set[asyncio.Task[None]],
    batcher: StepBatcher | None,
    sink: DeltaSink | None,
    grace_s: float,
) -> None:
    """Cancels every request's task (and waits up to `grace_s` for those and the ones cancelled
    before), flushes what the batcher holds, then ends each request with an ABORT delta."""
    for task, _ in requests.values():
        task.cancel()
    pending = [task for task, _ in requests.values()] + list(cancelled)
    if pending:
        await asyncio.wait(pending, timeout=grace_s)
    if batcher is not None:
        batcher.flush()
    finals = [r.usage.delta([], "", Finish.ABORT) for _, r in requests.values()]
    if finals and sink is not None:
        sink(finals)
