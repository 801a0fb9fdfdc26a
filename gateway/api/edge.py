"""What every connection of the HTTP edge shares, whichever server parses it: the head
timeout, where protocol errors go, and the raw answer for when no handler runs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from http import HTTPStatus

from gateway.api.openai import encode
from gateway.observability.labels import ProtocolError
from gateway.types import GatewayError

__all__ = ["Edge", "peer", "raw_response"]

log = logging.getLogger("gateway.api.http")


class Edge:
    """The head timeout, and where protocol errors go (counted, and logged once at INFO)."""

    __slots__ = ("count", "header_timeout_s")

    def __init__(self, header_timeout_s: float, count: Callable[[ProtocolError], None]) -> None:
        self.header_timeout_s = header_timeout_s
        self.count = count

    def report(self, kind: ProtocolError, peer: str | None, detail: str, rid: str = "") -> None:
        """`rid`: the id its answer names (x-request-id), if it got one."""
        self.count(kind)
        extra = {"kind": kind.value, "peer": peer, "detail": detail}
        if rid:
            extra["id"] = rid
        log.info("http protocol error", extra=extra)


def raw_response(err: GatewayError, rid: str) -> bytes:
    """A whole HTTP/1.1 response that closes the connection, for when no handler runs."""
    body = encode.error_body(err)
    phrase = HTTPStatus(err.status).phrase
    head = (
        f"HTTP/1.1 {err.status} {phrase}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nx-request-id: {rid}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def peer(transport: asyncio.BaseTransport | None) -> str | None:
    if transport is None:
        return None
    name = transport.get_extra_info("peername")
    return str(name[0]) if isinstance(name, tuple) and name else None
