"""Reading a request body with bounds: its size, and the longest wait for its next bytes."""

from __future__ import annotations

import asyncio

from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from gateway.api.http_errors import BrokenBody, body_timeout, detail
from gateway.api.http_server import EdgeProtocol
from gateway.observability.labels import ProtocolError
from gateway.types import PayloadTooLarge

__all__ = ["read_body", "too_large"]


def too_large(size: int | None, max_bytes: int) -> PayloadTooLarge:
    """The 413 of a body of `size` bytes (None: not known whole) past `max_bytes`, naming the
    setting that moves the limit."""
    said = f"is {size} bytes; the limit is" if size is not None else "is over the limit of"
    return PayloadTooLarge(f"Request body {said} {max_bytes} bytes (gateway.max_body_bytes).")


async def read_body(request: web.Request, max_bytes: int, gap_s: float) -> bytes:
    """The whole body. Raises `PayloadTooLarge` past `max_bytes`; `BodyTimeout` when no byte of
    it arrives for `gap_s`; `BrokenBody` when its framing or encoding breaks. After either of
    the last two the connection closes once the error is answered."""
    length = request.content_length
    if length is not None and length > max_bytes:
        raise too_large(length, max_bytes)
    stream = request.content
    chunks: list[bytes] = []
    size = 0
    try:
        while True:
            chunk = stream.read_nowait()  # what already arrived costs no timer
            if not chunk:
                if stream.at_eof():
                    break
                async with asyncio.timeout(gap_s):
                    chunk = await stream.readany()
                if not chunk:
                    break
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise too_large(None, max_bytes)
    except TimeoutError:
        _cut(request, ProtocolError.BODY_TIMEOUT, f"{size} bytes read")
        raise body_timeout(gap_s) from None
    except RequestPayloadError as e:
        _cut(request, ProtocolError.BAD_BODY, detail(e))
        raise BrokenBody(f"The request body cannot be read: {detail(e)}.") from None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _cut(request: web.Request, kind: ProtocolError, why: str) -> None:
    protocol = request.protocol
    if isinstance(protocol, EdgeProtocol):
        protocol.body_cut(kind, why)
