"""The gateway's errors as Anthropic's: an HTTP status and an error type.

Pure: a `GatewayError` in, ``{"type": "error", "error": {"type": ..., "message": ...}}`` out.
Anthropic says "overloaded" with 529, where the gateway's own answer is 503.
"""

from __future__ import annotations

from typing import Final

import msgspec

from gateway.types import GatewayError

__all__ = ["OVERLOADED", "error_body", "error_event", "error_status", "error_type"]

OVERLOADED: Final = 529

# Anthropic's error type for each status the edge answers with.
_TYPES: Final = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    OVERLOADED: "overloaded_error",
    504: "timeout_error",
}

_encode: Final = msgspec.json.Encoder().encode


def error_status(err: GatewayError) -> int:
    return OVERLOADED if err.status == 503 else err.status


def error_type(status: int) -> str:
    found = _TYPES.get(status)
    if found is not None:
        return found
    return "api_error" if status >= 500 else "invalid_request_error"


def _error(err: GatewayError) -> bytes:
    kind = error_type(error_status(err))
    return _encode({"type": "error", "error": {"type": kind, "message": err.message}})


def error_body(err: GatewayError) -> tuple[int, bytes]:
    """The HTTP status and JSON body of `err`."""
    return error_status(err), _error(err)


def error_event(err: GatewayError) -> bytes:
    """`err` as the SSE event of a stream that already started."""
    return b"event: error\ndata: " + _error(err) + b"\n\n"
