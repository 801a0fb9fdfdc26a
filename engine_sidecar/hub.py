"""Routes the engine's per-step output to the link or stream that owns each request.

The engine sees sidecar-wide keys; each outbox (a gateway link, or one Generate stream) sees its
own keys. The sink never blocks: it appends to the owner's outbox and wakes its writer once.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

from engine_sidecar.backend import (
    Backend,
    EngineDelta,
    EngineRequest,
    ErrorCode,
    RequestError,
)


class OutboxOverflow(Exception):
    """An outbox's reader stopped draining it: the link is dropped."""


class Outbox:
    """Deltas waiting for one writer, in engine order; bounded by `max_pending`.

    A writer that can send at once sets `direct`: a wake calls it where the wake happens (the
    engine's step, a heartbeat), and the writer's task is woken only when it answers False
    (its socket is backed up: the task waits for it to drain).
    """

    __slots__ = ("_event", "direct", "keys", "max_pending", "overflowed", "pending")

    def __init__(self, max_pending: int) -> None:
        self.pending: list[tuple[int, EngineDelta]] = []
        self.keys: dict[int, int] = {}  # outbox key -> engine key
        self.max_pending = max_pending
        self.overflowed = False
        self.direct: Callable[[], bool] | None = None
        self._event = asyncio.Event()

    def wake(self) -> None:
        if self.direct is None or not self.direct():
            self._event.set()

    async def wait(self) -> None:
        await self._event.wait()
        self._event.clear()

    def take(self) -> list[tuple[int, EngineDelta]]:
        out, self.pending = self.pending, []
        return out


class Hub:
    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._owners: dict[int, tuple[Outbox, int]] = {}
        self._ids = itertools.count(1)
        self.draining = False

    @property
    def inflight(self) -> int:
        return len(self._owners)

    def submit(self, box: Outbox, key: int, request: EngineRequest) -> None:
        """Hand a request to the engine; raises RequestError when it is refused."""
        if self.draining:
            raise RequestError(ErrorCode.UNAVAILABLE, "sidecar is draining")
        if key in box.keys:
            raise RequestError(ErrorCode.INVALID_ARGUMENT, f"duplicate request key {key}", "key")
        engine_key = next(self._ids)
        request.key = engine_key
        self._backend.submit(request)
        box.keys[key] = engine_key
        self._owners[engine_key] = (box, key)

    def abort(self, box: Outbox, key: int) -> None:
        engine_key = box.keys.pop(key, None)
        if engine_key is not None:
            self._owners.pop(engine_key, None)
            self._backend.abort(engine_key)

    def release(self, box: Outbox) -> None:
        """The owner is gone: abort everything it still has running."""
        for key in list(box.keys):
            self.abort(box, key)

    def sink(self, deltas: list[EngineDelta]) -> None:
        """The backend's sink: one call per engine step."""
        owners = self._owners
        woken: list[Outbox] = []
        for d in deltas:
            owner = owners.get(d.key)
            if owner is None:
                continue
            box, key = owner
            if d.finish:
                del owners[d.key]
                box.keys.pop(key, None)
            pending = box.pending
            if not pending:
                woken.append(box)
            elif len(pending) >= box.max_pending:
                box.overflowed = True
            pending.append((key, d))
        for box in woken:
            box.wake()
