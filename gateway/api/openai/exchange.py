"""What the OpenAI edge's handler needs of one HTTP exchange, whichever server carries it:
aiohttp's (gateway/api/aio_exchange.py) or the lean one for the streaming routes
(gateway/api/lean/). The handler reads the request through `Exchange` and answers with a
`Reply` (a whole JSON body) or through the `Outbound` stream it opened."""

from __future__ import annotations

import asyncio
from typing import Protocol

__all__ = ["Answered", "Exchange", "Outbound", "Reply"]


class Reply:
    """A 200 answer with a JSON body, and the headers it carries."""

    __slots__ = ("body", "headers")

    def __init__(self, body: bytes, headers: dict[str, str]) -> None:
        self.body = body
        self.headers = headers


class Outbound(Protocol):
    """A streamed 200 answer. Its head leaves with its first write."""

    @property
    def started(self) -> bool:
        """`start()` was called: the head is out, or leaves with the next write."""
        ...

    @property
    def chunked(self) -> bool:
        """Its body travels in HTTP chunks (what writes straight to the transport must do)."""
        ...

    async def start(self) -> None: ...

    async def write(self, data: bytes) -> None:
        """Raises `ConnectionResetError` once the client's connection is closing."""
        ...

    async def write_eof(self, data: bytes = b"") -> None: ...


class Exchange(Protocol):
    @property
    def transport(self) -> asyncio.Transport | None: ...

    def header(self, name: str) -> str | None:
        """The first value of a request header (any case of `name`)."""
        ...

    async def body(self, max_bytes: int, gap_s: float) -> bytes:
        """The whole request body, read once (raises as gateway/api/body.py's `read_body`)."""
        ...

    def sse(self, headers: dict[str, str]) -> Outbound:
        """A streamed answer with these headers (the SSE ones among them)."""
        ...


Answered = Reply | Outbound
