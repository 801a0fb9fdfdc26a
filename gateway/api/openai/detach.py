"""The stream's own HTTP client, as the first reader of its kept stream."""

from __future__ import annotations

from aiohttp import web


class Writer:
    """Replaced by a reader that reattaches: its connection is closed (and the stream goes on
    for the new reader)."""

    __slots__ = ("_request",)

    def __init__(self, request: web.Request) -> None:
        self._request = request

    def replaced(self) -> None:
        transport = self._request.transport
        if transport is not None:
            transport.close()
