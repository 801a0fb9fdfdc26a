"""What every HTTP server of the edge answers the same way: a request's id, and an error's
status, headers and JSON body."""

from __future__ import annotations

import re

from gateway.api.error_shapes import ErrorShape, error_shape
from gateway.ids import new_request_id
from gateway.types import GatewayError

__all__ = ["error_parts", "request_id"]

_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")  # (whole: no trailing newline)


def request_id(asked: str | None) -> str:
    """The client's `x-request-id` when it is a plain short id, else a new one."""
    if asked and _REQUEST_ID.fullmatch(asked):
        return asked
    return new_request_id()


def error_parts(
    err: GatewayError, rid: str, shape: ErrorShape | None = None
) -> tuple[int, dict[str, str], bytes]:
    """The status, headers (the error's own and the request id) and body of an error."""
    headers = dict(err.headers)
    headers["x-request-id"] = rid
    status, body = (shape or error_shape(""))(err)
    return status, headers, body
