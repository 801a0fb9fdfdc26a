"""What the HTTP edge answers to protocol garbage: the kind (a metrics label) and the error.

Pure: an aiohttp parser exception in, a `ProtocolError` and a `GatewayError` out. Nothing here
echoes more than one short line of what the client sent.
"""

from __future__ import annotations

from typing import Final

from aiohttp.http_exceptions import (
    BadHttpMessage,
    BadStatusLine,
    HttpProcessingError,
    InvalidURLError,
    LineTooLong,
)

from gateway.observability.labels import ProtocolError
from gateway.types import GatewayError, InvalidRequest

__all__ = [
    "BadProtocol",
    "BodyTimeout",
    "BrokenBody",
    "ClosingError",
    "HeaderTimeout",
    "HeadersTooLarge",
    "body_timeout",
    "detail",
    "head_timeout",
    "refusal",
]

# The parser's one error for too many header fields has no class of its own.
_TOO_MANY_HEADERS: Final = "Too many headers"
_DETAIL_CHARS: Final = 200


class ClosingError(GatewayError):
    """An error after which the connection cannot carry another request: it is closed."""


class HeadersTooLarge(ClosingError):
    status = 431
    type = "invalid_request_error"


class BadProtocol(ClosingError, InvalidRequest):
    """Not valid HTTP/1.1 (request line, headers or body framing)."""


class HeaderTimeout(ClosingError):
    status = 408
    type = "timeout"


class BodyTimeout(ClosingError):
    status = 408
    type = "timeout"


def body_timeout(gap_s: float) -> BodyTimeout:
    return BodyTimeout(
        f"The request body stopped arriving for {gap_s:g} s (gateway.client_body_timeout_s)."
    )


def head_timeout(timeout_s: float) -> HeaderTimeout:
    return HeaderTimeout(
        f"The request head did not arrive within {timeout_s:g} s (gateway.client_header_timeout_s)."
    )


class BrokenBody(BadProtocol):
    """The body broke while it was read (its chunked framing, or its Content-Encoding)."""


def detail(exc: BaseException) -> str:
    """The first line of the parser's message, short (it may quote what the client sent)."""
    cause = exc.__cause__  # aiohttp wraps a body's parser error in a RequestPayloadError
    if not isinstance(exc, HttpProcessingError) and isinstance(cause, HttpProcessingError):
        exc = cause
    text = exc.message if isinstance(exc, HttpProcessingError) else str(exc)
    line = text.split("\n", 1)[0].rstrip(":. ")
    return line if len(line) <= _DETAIL_CHARS else line[:_DETAIL_CHARS] + "..."


def refusal(exc: HttpProcessingError) -> tuple[ProtocolError, GatewayError]:
    """The kind of a request head the parser refused, and the error to answer it with."""
    if isinstance(exc, LineTooLong):
        limit = exc.args[1] if len(exc.args) > 1 else "the limit of"
        return ProtocolError.HEADERS_TOO_LARGE, HeadersTooLarge(
            f"A request line or header field is longer than {limit} bytes"
            " (gateway.max_request_line_bytes, gateway.max_header_field_bytes)."
        )
    if isinstance(exc, BadHttpMessage) and exc.message.startswith(_TOO_MANY_HEADERS):
        return ProtocolError.HEADERS_TOO_LARGE, HeadersTooLarge(
            "The request has too many header fields (gateway.max_headers)."
        )
    if isinstance(exc, BadStatusLine | InvalidURLError):
        return ProtocolError.BAD_REQUEST_LINE, BadProtocol(
            f"The request line is not valid HTTP: {detail(exc)}."
        )
    return ProtocolError.BAD_HEADER, BadProtocol(f"The request is not valid HTTP: {detail(exc)}.")
