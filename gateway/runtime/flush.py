"""Coalesces direct writes: sinks that buffered frames while the link reader handled one engine
message are flushed together when it is done, so a client gets one send() per message, however
many of its tokens the message held."""

from __future__ import annotations

from typing import Protocol


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
                sink.flush()


# One per process: every link reader flushes at the end of each message it handles.
FLUSHER = Flusher()
