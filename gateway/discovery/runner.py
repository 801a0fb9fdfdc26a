"""A discovery: its source's views turned into the fleet's sidecar set, and how current it is.

A source (DNS, Kubernetes) runs as one owned task and reports to its `Discovery` (the sink):
`synced(members)` with each complete view, `failed(kind, detail)` when it could not get one.
A failure never empties the set: the last known one stays in force, marked stale, until a view
arrives again. Each change (`policy.discovery.diff`) goes to `on_change` as the routable
sidecars, which the composition root hands to the fleet (connected, health-checked and drained
exactly as a config reload does it).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from gateway import tasks
from gateway.config.schema import SidecarEndpoint
from gateway.policy.discovery import Member, MemberState, diff

log = logging.getLogger(__name__)


class ErrorKind(enum.Enum):
    LIST = "list"  # a list (or a DNS resolution) failed or was refused
    WATCH = "watch"  # a watch failed, or the API server sent an error event
    EXPIRED = "expired"  # 410 Gone: the resource version is too old; listed again at once
    SILENT = "silent"  # a watch sent nothing past its timeoutSeconds
    INVALID = "invalid"  # an answer that does not decode
    RESOLVE = "resolve"  # DNS: no answer, or none in time


class Sink(Protocol):
    def synced(self, members: Mapping[str, Member]) -> None: ...

    def failed(self, kind: ErrorKind, detail: str) -> None: ...


class Source(Protocol):
    async def run(self, sink: Sink) -> None:
        """Report views to `sink` until cancelled; failures are reported, never raised."""
        ...


class Discovery:
    def __init__(
        self,
        source: Source,
        on_change: Callable[[list[SidecarEndpoint]], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.on_change = on_change
        self.members: dict[str, Member] = {}
        self.stale = True  # until the first view
        self.last_sync: float | None = None
        self.errors: dict[ErrorKind, int] = dict.fromkeys(ErrorKind, 0)
        self._clock = clock
        self._task: asyncio.Task[None] | None = None

    # -- the sink --------------------------------------------------------------------------
    def synced(self, members: Mapping[str, Member]) -> None:
        plan = diff(self.members, members)
        self.members = dict(plan.members)
        self.last_sync = self._clock()
        if self.stale:
            log.info("discovery: in sync (%d sidecars routable)", len(plan.routable()))
        self.stale = False
        if not plan.changed:
            return
        for m in plan.add:
            log.info("discovery: sidecar %s at %s routable", m.name, m.address)
        for name in plan.drain:
            log.info("discovery: sidecar %s draining", name)
        for name in plan.remove:
            log.info("discovery: sidecar %s gone", name)
        self.on_change(self.endpoints())

    def failed(self, kind: ErrorKind, detail: str) -> None:
        self.errors[kind] += 1
        if kind is ErrorKind.EXPIRED:  # routine (the API server compacted): listed again at once
            log.info("discovery: %s", detail)
            return
        log.warning(
            "discovery %s error: %s; keeping the last %d sidecars (stale)",
            kind.value,
            detail,
            len(self.members),
        )
        self.stale = True

    # -- what the fleet and the metrics read ----------------------------------------------
    def endpoints(self) -> list[SidecarEndpoint]:
        routable = (m for m in self.members.values() if m.state is MemberState.ROUTABLE)
        return [SidecarEndpoint(name=m.name, address=m.address) for m in routable]

    def age_s(self) -> float | None:
        """Seconds since the last complete view (None: none yet)."""
        return None if self.last_sync is None else self._clock() - self.last_sync

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="discovery")

    async def _run(self) -> None:
        while True:  # supervised: a source that fails unexpectedly is logged and started again
            try:
                await self.source.run(self)
            except Exception as e:
                self.failed(ErrorKind.LIST, f"{type(e).__name__}: {e}")
                log.exception("discovery source failed; starting it again")
            await asyncio.sleep(1.0)

    async def close(self) -> None:
        task, self._task = self._task, None
        await tasks.stop(task)
