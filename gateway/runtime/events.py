"""The runtime's one event queue: everything but tokens goes through it.

Tokens take the short path (link reader -> the request's stream -> the client's socket, no task,
no await). Everything else that happens to a request or a sidecar (finished, failed, client
gone, timer expired, link up, heartbeat, link down) is posted here and handled once per loop
iteration, in order, by the handler its owner registered: nothing re-enters the runtime from
inside a socket callback. A handler that raises ends the one request its event was about (the
owner's `on_error`), never the link or the queue.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.runtime.job import Job
    from gateway.types import GatewayError
    from gateway.upstream.link import EngineLink

log = logging.getLogger(__name__)

# Events handled in one go before the rest waits for the next loop iteration (a handler that
# keeps posting cannot starve the loop).
MAX_PER_DRAIN = 4096


@dataclass(frozen=True, slots=True)
class Finished:
    """The engine sent the request's last delta (the client already has it)."""

    job: Job


@dataclass(frozen=True, slots=True)
class Failed:
    """Attempt `attempt` of the request failed on its replica (or its link went down)."""

    job: Job
    attempt: int
    error: GatewayError


@dataclass(frozen=True, slots=True)
class Left:
    """The client side is gone: it disconnected, or its deadline passed."""

    job: Job
    timed_out: bool


@dataclass(frozen=True, slots=True)
class LinkUp:
    link: EngineLink


@dataclass(frozen=True, slots=True)
class LinkBeat:
    link: EngineLink


@dataclass(frozen=True, slots=True)
class LinkDown:
    link: EngineLink


Handler = Callable[[Any], None]


class EventQueue:
    __slots__ = ("_armed", "_events", "_handlers", "_schedule", "on_error")

    def __init__(self, schedule: Callable[[Callable[[], None]], object] | None = None) -> None:
        """`schedule(fn)` runs fn later (the running loop's call_soon unless given: tests
        drain by hand)."""
        self._events: deque[object] = deque()
        self._handlers: dict[type, Handler] = {}
        self._armed = False
        self._schedule = schedule
        # Told of an event whose handler raised (after it was logged).
        self.on_error: Callable[[object, Exception], None] | None = None

    def register(self, kind: type, handler: Handler) -> None:
        self._handlers[kind] = handler

    def post(self, event: object) -> None:
        self._events.append(event)
        if not self._armed:
            self._arm()

    def _arm(self) -> None:
        self._armed = True
        if self._schedule is not None:
            self._schedule(self.drain)
        else:
            asyncio.get_running_loop().call_soon(self.drain)

    def __len__(self) -> int:
        return len(self._events)

    def drain(self) -> None:
        """Handle what is queued (and what handling it posts), up to MAX_PER_DRAIN events."""
        events = self._events
        handlers = self._handlers
        self._armed = True  # what handlers post is handled here, not in another drain
        try:
            for _ in range(MAX_PER_DRAIN):
                if not events:
                    return
                event = events.popleft()
                try:
                    handlers[type(event)](event)
                except Exception as e:
                    self._failed(event, e)
        finally:
            self._armed = False
            if events:
                self._arm()

    def _failed(self, event: object, error: Exception) -> None:
        log.exception("handling %s failed", type(event).__name__)
        if self.on_error is not None:
            try:
                self.on_error(event, error)
            except Exception:
                log.exception("ending the request of a failed event failed")
