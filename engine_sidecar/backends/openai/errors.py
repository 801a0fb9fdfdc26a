"""How the server's refusals and failures end a request (the ERROR delta's code)."""

from __future__ import annotations

from engine_sidecar.backend import ErrorCode


def status_code(status: int) -> ErrorCode:
    """An HTTP error status -> the request's error code. UNAVAILABLE is retriable: the gateway
    moves the request to another replica."""
    if status == 404:
        return ErrorCode.NOT_FOUND
    if status in (408, 429, 502, 503, 504):
        return ErrorCode.UNAVAILABLE
    if 400 <= status < 500:
        return ErrorCode.INVALID_ARGUMENT
    return ErrorCode.INTERNAL
