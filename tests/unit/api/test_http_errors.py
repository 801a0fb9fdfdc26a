"""What the HTTP edge answers to each kind of protocol garbage (gateway.api.http_errors)."""

from __future__ import annotations

import pytest
from aiohttp.http_exceptions import (
    BadHttpMessage,
    BadHttpMethod,
    BadStatusLine,
    HttpProcessingError,
    InvalidHeader,
    InvalidURLError,
    LineTooLong,
    TransferEncodingError,
)
from aiohttp.web_protocol import RequestPayloadError

from gateway.api.http_errors import ClosingError, body_timeout, detail, head_timeout, refusal
from gateway.api.http_server import raw_response
from gateway.observability.labels import ProtocolError
from gateway.types import GatewayError


@pytest.mark.parametrize(
    ("exc", "kind", "status"),
    [
        (LineTooLong(b"X-Big: aaaa...", 8190), ProtocolError.HEADERS_TOO_LARGE, 431),
        (BadHttpMessage("Too many headers received"), ProtocolError.HEADERS_TOO_LARGE, 431),
        (BadHttpMethod("\x16\x03\x01"), ProtocolError.BAD_REQUEST_LINE, 400),
        (BadStatusLine("NOT HTTP"), ProtocolError.BAD_REQUEST_LINE, 400),
        (InvalidURLError("Invalid URL"), ProtocolError.BAD_REQUEST_LINE, 400),
        (InvalidHeader(b"Bad\x00Header"), ProtocolError.BAD_HEADER, 400),
        (BadHttpMessage("Duplicate 'Content-Length' header found."), ProtocolError.BAD_HEADER, 400),
        (TransferEncodingError("Invalid chunk size"), ProtocolError.BAD_HEADER, 400),
    ],
)
def test_refusal(exc: HttpProcessingError, kind: ProtocolError, status: int) -> None:
    got_kind, err = refusal(exc)
    assert got_kind is kind
    assert err.status == status
    assert err.type == "invalid_request_error"
    assert isinstance(err, ClosingError)  # the connection cannot carry another request
    assert "\n" not in err.message


def test_oversized_line_names_the_limit_not_the_line() -> None:
    _, err = refusal(LineTooLong(b"Cookie: secret...", 4096))
    assert "4096" in err.message
    assert "secret" not in err.message


@pytest.mark.parametrize(
    ("err", "settings"),
    [
        (refusal(LineTooLong(b"x", 10))[1], ["max_request_line_bytes", "max_header_field_bytes"]),
        (refusal(BadHttpMessage("Too many headers received"))[1], ["max_headers"]),
        (head_timeout(10.0), ["client_header_timeout_s"]),
        (body_timeout(10.0), ["client_body_timeout_s"]),
    ],
    ids=["long-line", "many-headers", "head-timeout", "body-timeout"],
)
def test_a_limits_refusal_names_its_setting(err: GatewayError, settings: list[str]) -> None:
    for name in settings:
        assert f"gateway.{name}" in err.message


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("Invalid method encountered:\n\n  b'FOO'\n  ^", "Invalid method encountered"),
        ("Bad status line 'x'.", "Bad status line 'x'"),
        ("a" * 500, "a" * 200 + "..."),
    ],
)
def test_detail_is_one_short_line(message: str, expected: str) -> None:
    assert detail(BadHttpMessage(message)) == expected


def test_raw_response_is_a_closing_http_response_with_a_json_body() -> None:
    _, err = refusal(LineTooLong(b"x", 10))
    raw = raw_response(err, "rid-1")
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 431 Request Header Fields Too Large"
    assert b"Connection: close" in lines
    assert b"x-request-id: rid-1" in lines
    assert f"Content-Length: {len(body)}".encode() in lines
    assert body.startswith(b'{"error":')


def test_detail_of_a_wrapped_body_error_is_the_parser_s() -> None:
    try:
        try:
            raise BadHttpMessage("Can not decode content-encoding: gzip")
        except BadHttpMessage as e:
            raise RequestPayloadError(str(e)) from e
    except RequestPayloadError as wrapped:
        assert detail(wrapped) == "Can not decode content-encoding: gzip"
