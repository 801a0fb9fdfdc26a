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

`EdgeRunner` is `web.AppRunner` whose server makes `EdgeProtocol`s, or, with
`gateway.lean_http`, lean connections in front of them (gateway/api/lean/).
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from aiohttp.http import RawRequestMessage
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler, RequestPayloadError
from aiohttp.web_request import BaseRequest

from gateway.api.edge import Edge, peer, raw_response
from gateway.api.error_shapes import error_shape
from gateway.api.http_errors import detail, head_timeout, refusal
from gateway.api.lean.front import LeanFront
from gateway.api.lean.protocol import LeanProtocol
from gateway.api.openai import encode
from gateway.api.replies import request_id
from gateway.ids import new_request_id
from gateway.observability.labels import ProtocolError
from gateway.types import GatewayError

__all__ = ["RESTART_ONLY_HTTP", "Edge", "EdgeProtocol", "EdgeRunner", "raw_response"]

# GatewaySettings fields the runner takes at start: a reload cannot change them.
RESTART_ONLY_HTTP = (
    "client_header_timeout_s",
    "keepalive_timeout_s",
    "max_request_line_bytes",
    "max_header_field_bytes",
    "max_headers",
)


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

    def take_over(
        self, transport: asyncio.Transport, data: bytes, head_since: float, paused: bool
    ) -> None:
        """A lean connection's (gateway/api/lean/) from its request's first byte, `data`: the
        head timer runs from `head_since`, when that request (or the connection) began."""
        transport.set_protocol(self)
        self.connection_made(transport)
        if paused:
            self.pause_writing()
        self._disarm_head_timer()
        self._heads = self._request_count
        when = head_since + self._edge.header_timeout_s
        self._head_timer = self._loop.call_at(when, self._head_late)
        self.data_received(data)

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
        rid = new_request_id()
        self._edge.report(ProtocolError.HEADER_TIMEOUT, peer(transport), "request head", rid)
        transport.write(raw_response(head_timeout(self._edge.header_timeout_s), rid))
        self.force_close()  # the transport sends what it holds, then closes

    # -- protocol errors ---------------------------------------------------------------------
    def body_cut(self, kind: ProtocolError, detail: str) -> None:
        """A handler gave up on the request's body: count it, and close the connection right
        after the answer instead of reading the rest of the body."""
        self._edge.report(kind, peer(self.transport), detail)
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
        rid = request_id(request.headers.get("x-request-id"))
        self._edge.report(kind, peer(self.transport), detail(exc), rid)
        resp = web.Response(
            status=err.status,
            body=encode.error_body(err),
            content_type="application/json",
            headers={"x-request-id": rid},
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
            rid = request_id(request.headers.get("x-request-id"))
            json_resp = web.Response(
                status=status,
                body=body,
                content_type="application/json",
                headers={"x-request-id": rid},
            )
            if not resp.keep_alive:
                json_resp.force_close()
            resp = json_resp
        return await super().finish_response(request, resp, start_time)


class _EdgeServer(web.Server):
    """aiohttp's server, making `EdgeProtocol`s; or, with a lean front, lean connections that
    hand themselves to an `EdgeProtocol` at their first request the lean path does not take."""

    def __init__(self, plain: web.Server, edge: Edge, lean: LeanFront | None) -> None:
        super().__init__(
            plain.request_handler,
            request_factory=plain.request_factory,
            handler_cancellation=plain.handler_cancellation,
            loop=plain._loop,
            **plain._kwargs,
        )
        self.edge = edge
        self.lean = lean
        if lean is not None:
            lean.make_edge = self.edge_protocol

    def edge_protocol(self) -> EdgeProtocol:
        return EdgeProtocol(self, self.edge, loop=self._loop, **self._kwargs)

    def __call__(self) -> RequestHandler:
        """The protocol of a new connection (asyncio takes any protocol from this factory)."""
        if self.lean is not None:
            return LeanProtocol(self.lean)  # type: ignore[return-value]
        return self.edge_protocol()

    def pre_shutdown(self) -> None:
        super().pre_shutdown()
        if self.lean is not None:
            self.lean.pre_shutdown()

    async def shutdown(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 (aiohttp's)
        if self.lean is None:
            await super().shutdown(timeout)
            return
        await asyncio.gather(super().shutdown(timeout), self.lean.shutdown(timeout))


class EdgeRunner(web.AppRunner):
    """`web.AppRunner` (same arguments, plus the edge and the lean front, if any) serving
    through `EdgeProtocol` (behind lean connections with a lean front)."""

    __slots__ = ("_edge", "_lean")

    def __init__(
        self, app: web.Application, edge: Edge, lean: LeanFront | None = None, **kwargs: Any
    ) -> None:
        super().__init__(app, **kwargs)
        self._edge = edge
        self._lean = lean

    async def _make_server(self) -> web.Server:
        return _EdgeServer(await super()._make_server(), self._edge, self._lean)
