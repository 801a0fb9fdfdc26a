"""The HTTP edge's connections: aiohttp's protocol with the limits it lacks.

aiohttp bounds the request line, header fields and idle keep-alive connections (runner
arguments) but not the time a client may take to send a request head, and it logs every
protocol error as an ERROR with a traceback. `EdgeProtocol` adds:

- a head timer per connection, armed when the connection opens and again when the first byte
  of a later request arrives, disarmed when the parser has the whole head: a client that
  trickles its head gets 408 and is closed;
- protocol errors (bad request line or headers, oversized heads, head and body timeouts)
  answered as OpenAI-style JSON (431 for oversized heads), as is any error aiohttp raises
  past the middleware; protocol errors are counted in
  `shardgate_http_protocol_errors_total{kind}` and logged once, at INFO, on one line.

`EdgeRunner` is `web.AppRunner` whose server makes `EdgeProtocol`s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.http import RawRequestMessage
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler, RequestPayloadError
from aiohttp.web_request import BaseRequest

from gateway.api.error_shapes import error_shape
from gateway.api.http_errors import HeaderTimeout, detail, refusal
from gateway.api.openai import encode
from gateway.observability.labels import ProtocolError
from gateway.types import GatewayError

__all__ = ["RESTART_ONLY_HTTP", "Edge", "EdgeProtocol", "EdgeRunner", "raw_response"]

log = logging.getLogger("gateway.api.http")

# GatewaySettings fields the runner takes at start: a reload cannot change them.
RESTART_ONLY_HTTP = (
    "client_header_timeout_s",
    "keepalive_timeout_s",
    "max_request_line_bytes",
    "max_header_field_bytes",
    "max_headers",
)


class Edge:
    """What every connection shares: the head timeout and where protocol errors go."""

    __slots__ = ("count", "header_timeout_s")

    def __init__(self, header_timeout_s: float, count: Callable[[ProtocolError], None]) -> None:
        self.header_timeout_s = header_timeout_s
        self.count = count

    def report(self, kind: ProtocolError, peer: str | None, detail: str) -> None:
        self.count(kind)
        log.info("http protocol error", extra={"kind": kind.value, "peer": peer, "detail": detail})


def raw_response(err: GatewayError) -> bytes:
    """A whole HTTP/1.1 response that closes the connection, for when no handler runs."""
    body = encode.error_body(err)
    phrase = HTTPStatus(err.status).phrase
    head = (
        f"HTTP/1.1 {err.status} {phrase}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def _peer(transport: asyncio.BaseTransport | None) -> str | None:
    if transport is None:
        return None
    name = transport.get_extra_info("peername")
    return str(name[0]) if isinstance(name, tuple) and name else None


class EdgeProtocol(RequestHandler):
    __slots__ = ("_edge", "_head_timer", "_heads")

    def __init__(self, manager: web.Server, edge: Edge, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._edge = edge
        self._head_timer: asyncio.TimerHandle | None = None
        self._heads = 0  # request heads parsed when the timer was armed

    # -- the head timer ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        if self._head_timer is None and data and self._idle():
            self._arm_head_timer()  # the first byte of the next request
        parsed = self._request_count
        super().data_received(data)
        if self._request_count != parsed:
            self._disarm_head_timer()  # the parser has the whole head (or refused it)
            self._break_body_on_error()

    def _break_body_on_error(self) -> None:
        """The parser refused what follows a request's head (a broken chunk): the body that
        request is reading ends with that error instead of waiting for bytes that never come."""
        request = self._current_request
        if request is None or not self._messages:
            return
        msg, _ = self._messages[-1]
        if not isinstance(msg, RawRequestMessage) and not request.content.is_eof():
            request.content.set_exception(RequestPayloadError(msg.message))

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def _idle(self) -> bool:
        """Waiting for the next request: no handler runs, nothing is being answered."""
        waiter = self._waiter
        return waiter is not None and not waiter.done()

    def _arm_head_timer(self) -> None:
        self._heads = self._request_count
        self._head_timer = self._loop.call_later(self._edge.header_timeout_s, self._head_late)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        transport = self.transport
        if transport is None or self._force_close or self._request_count != self._heads:
            return
        self._edge.report(ProtocolError.HEADER_TIMEOUT, _peer(transport), "request head")
        err = HeaderTimeout(
            f"The request head did not arrive within {self._edge.header_timeout_s:g} s."
        )
        transport.write(raw_response(err))
        self.force_close()  # the transport sends what it holds, then closes

    # -- protocol errors ---------------------------------------------------------------------
    def body_cut(self, kind: ProtocolError, detail: str) -> None:
        """A handler gave up on the request's body: count it, and close the connection right
        after the answer instead of reading the rest of the body."""
        self._edge.report(kind, _peer(self.transport), detail)
        self._lingering_time = 0.0

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        kind, err = refusal(exc)
        self._edge.report(kind, _peer(self.transport), detail(exc))
        resp = web.Response(
            status=err.status, body=encode.error_body(err), content_type="application/json"
        )
        resp.force_close()
        return resp

    async def finish_response(
        self, request: BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        """An aiohttp error raised where no middleware sees it (an unknown Expect, answered
        before routing) leaves as JSON like every other error (in its route's API's shape)."""
        if isinstance(resp, web.HTTPException) and resp.status >= 400:
            err = GatewayError(resp.text or resp.reason)
            err.status = resp.status
            err.type = "invalid_request_error"
            status, body = error_shape(request.path)(err)
            json_resp = web.Response(status=status, body=body, content_type="application/json")
            if not resp.keep_alive:
                json_resp.force_close()
            resp = json_resp
        return await super().finish_response(request, resp, start_time)


class _EdgeServer(web.Server):
    """aiohttp's server, making `EdgeProtocol`s."""

    def __init__(self, plain: web.Server, edge: Edge) -> None:
        super().__init__(
            plain.request_handler,
            request_factory=plain.request_factory,
            handler_cancellation=plain.handler_cancellation,
            loop=plain._loop,
            **plain._kwargs,
        )
        self.edge = edge

    def __call__(self) -> RequestHandler:
        return EdgeProtocol(self, self.edge, loop=self._loop, **self._kwargs)


class EdgeRunner(web.AppRunner):
    """`web.AppRunner` (same arguments, plus the edge) serving through `EdgeProtocol`."""

    __slots__ = ("_edge",)

    def __init__(self, app: web.Application, edge: Edge, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._edge = edge

    async def _make_server(self) -> web.Server:
        return _EdgeServer(await super()._make_server(), self._edge)
