"""Coalesces direct writes: sinks that buffered frames while the link reader handled one engine
message are flushed together when it is done, so a client gets one send() per message, however
many of its tokens the message held."""

from __future__ import annotations

import logging
from typing import Protocol

log = logging.getLogger(__name__)


class Flushable(Protocol):
    def flush(self) -> None: ...


class Flusher:
    __slots__ = ("dirty",)

    def __init__(self) -> None:
        self.dirty: list[Flushable] = []

    def flush(self) -> None:
        dirty = self.dirty
        if dirty:
            self.dirty = []
            for sink in dirty:
                try:
                    sink.flush()
                except Exception:  # one client's write must not keep the others' back
                    log.exception("a direct write failed")


# One per process: every link reader flushes at the end of each message it handles.
FLUSHER = Flusher()
