"""One sink call per engine step for backends whose outputs arrive request by request.

A real engine hands out one step's outputs to several per-request consumers, which all run in
the same event-loop iteration. The batcher gathers what they add and flushes it with
`loop.call_soon`, so the sink sees one list per step (the Backend contract), not one per request.
"""

from __future__ import annotations

import asyncio

from engine_sidecar.backend import DeltaSink, EngineDelta


class StepBatcher:
    __slots__ = ("_loop", "_pending", "_sink")

    def __init__(self, sink: DeltaSink, loop: asyncio.AbstractEventLoop) -> None:
        self._sink = sink
        self._loop = loop
        self._pending: list[EngineDelta] = []

    def add(self, delta: EngineDelta) -> None:
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(delta)

    def discard(self, key: int) -> None:
        """Drop what is pending for an aborted request: no delta follows an abort."""
        if self._pending:
            self._pending = [d for d in self._pending if d.key != key]

    def flush(self) -> None:
        out, self._pending = self._pending, []
        if out:
            self._sink(out)
