"""The OpenAI handler's exchange over aiohttp: a `web.Request` read, a `web.StreamResponse`
written (gateway/api/openai/exchange.py)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from gateway.api.body import read_body
from gateway.api.openai.exchange import Answered, Reply
from gateway.api.openai.sse import SSEResponse

__all__ = ["AioExchange", "AioOutbound", "response_of"]


class AioOutbound:
    __slots__ = ("_request", "resp")

    def __init__(self, request: web.Request, headers: dict[str, str]) -> None:
        self._request = request
        self.resp = SSEResponse(headers=headers)

    @property
    def started(self) -> bool:
        return self.resp.prepared

    @property
    def chunked(self) -> bool:
        return self.resp.headers.get("Transfer-Encoding", "").lower() == "chunked"

    async def start(self) -> None:
        await self.resp.prepare(self._request)

    async def write(self, data: bytes) -> None:
        await self.resp.write(data)

    async def write_eof(self, data: bytes = b"") -> None:
        await self.resp.write_eof(data)


class AioExchange:
    __slots__ = ("_request",)

    def __init__(self, request: web.Request) -> None:
        self._request = request

    @property
    def transport(self) -> asyncio.Transport | None:
        return self._request.transport

    def header(self, name: str) -> str | None:
        return self._request.headers.get(name)

    async def body(self, max_bytes: int, gap_s: float) -> bytes:
        return await read_body(self._request, max_bytes, gap_s)

    def sse(self, headers: dict[str, str]) -> AioOutbound:
        return AioOutbound(self._request, headers)


def response_of(answer: Answered) -> web.StreamResponse:
    """What aiohttp sends for the handler's answer."""
    if isinstance(answer, Reply):
        return web.Response(
            body=answer.body, content_type="application/json", headers=answer.headers
        )
    assert isinstance(answer, AioOutbound)
    return answer.resp
