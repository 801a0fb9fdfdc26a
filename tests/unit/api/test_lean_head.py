"""Which request heads the lean path takes (gateway.api.lean.head), and its response bytes."""

from __future__ import annotations

from typing import Any, cast

import pytest

from gateway.api.lean import wire
from gateway.api.lean.exchange import LeanExchange
from gateway.api.lean.head import MAX_HEAD_BYTES, Head, HeadLimits, HeadReader

LIMITS = HeadLimits(max_line=200, max_field=100, max_headers=6, max_body=1000)
CHAT = b"POST /v1/chat/completions HTTP/1.1\r\n"


def verdict(head: bytes, limits: HeadLimits = LIMITS) -> Head | bool | None:
    end = head.find(b"\r\n\r\n")
    return HeadReader(limits).feed(head, end >= 0 and end + 4 == len(head))


def lean(head: bytes) -> Head:
    got = verdict(head)
    assert isinstance(got, Head), got
    return got


@pytest.mark.parametrize(
    ("head", "path", "kind", "length", "close"),
    [
        (CHAT + b"Host: a\r\nContent-Length: 12\r\n\r\n", "/v1/chat/completions", "chat", 12,
         False),
        (b"POST /v1/completions?x=1 HTTP/1.1\r\nContent-Length: 0\r\n\r\n", "/v1/completions",
         "completion", 0, False),
        (CHAT + b"Content-Length: 5\r\nConnection: Close\r\n\r\n", "/v1/chat/completions", "chat",
         5, True),
        (CHAT + b"Content-Length: 5\r\nconnection: keep-alive\r\n\r\n", "/v1/chat/completions",
         "chat", 5, False),
        (CHAT + b"CONTENT-LENGTH: 1000\r\n\r\n", "/v1/chat/completions", "chat", 1000, False),
    ],
)  # fmt: skip
def test_heads_the_lean_path_takes(
    head: bytes, path: str, kind: str, length: int, close: bool
) -> None:
    got = lean(head)
    assert (got.path, got.kind, got.length, got.close) == (path, kind, length, close)


def test_the_headers_its_handler_reads_are_kept_by_lower_case_name_the_rest_dropped() -> None:
    got = lean(
        CHAT + b"Authorization: Bearer sk-1\r\nX-Priority: 3\r\nUser-Agent: OpenAI/Python\r\n"
        b"Content-Length: 2\r\n\r\n"
    )
    assert got.headers == {"authorization": "Bearer sk-1", "x-priority": "3"}
    assert got.length == 2


def test_its_exchange_answers_for_the_kept_headers_and_refuses_to_guess_the_others() -> None:
    head = lean(CHAT + b"Authorization: Bearer sk-1\r\nUser-Agent: x\r\nContent-Length: 2\r\n\r\n")
    ex = LeanExchange(cast(Any, None), head, b"{}")
    assert ex.header("Authorization") == "Bearer sk-1"
    assert ex.header("x-session-id") is None  # kept when sent: not sent
    with pytest.raises(KeyError, match="user-agent"):
        ex.header("user-agent")  # dropped: a handler that asks is wrong, not told None


@pytest.mark.parametrize(
    "head",
    [
        b"GET /v1/chat/completions HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
        b"POST /v1/models HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
        b"POST /v1/chat/completions/x HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
        b"POST /v1/chat/completions#f HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.0\r\nContent-Length: 0\r\n\r\n",
        b"POST http://a/v1/chat/completions HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
        CHAT + b"\r\n",  # no Content-Length
        CHAT + b"Content-Length: 1001\r\n\r\n",  # over the body limit
        CHAT + b"Content-Length: +5\r\n\r\n",
        CHAT + b"Content-Length: 5\r\nContent-Length: 5\r\n\r\n",
        CHAT + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        CHAT + b"Transfer-Encoding: chunked\r\n\r\n",
        CHAT + b"Content-Length: 5\r\nExpect: 100-continue\r\n\r\n",
        CHAT + b"Content-Length: 5\r\nUpgrade: h2c\r\n\r\n",
        CHAT + b"Content-Length: 5\r\nContent-Encoding: gzip\r\n\r\n",
        CHAT + b"Content-Length: 5\r\nConnection: keep-alive, Upgrade\r\n\r\n",
        CHAT + b"Content-Length: 5\r\nX-A: 1\r\nx-a: 2\r\n\r\n",  # repeated
        CHAT + b"Content-Length: 5\r\nX-A: caf\xc3\xa9\r\n\r\n",  # not ASCII
        CHAT + b"Content-Length: 5\r\nX-Big: " + b"a" * 101 + b"\r\n\r\n",  # a long field
        CHAT + b"".join(b"X-%d: v\r\n" % i for i in range(6)) + b"Content-Length: 5\r\n\r\n",
        b"POST /v1/completions?" + b"q" * 200 + b" HTTP/1.1\r\nContent-Length: 5\r\n\r\n",
        CHAT + b"Content-Length: 5\r\nBad Header\r\n\r\n",  # llhttp refuses it
        b"NOT HTTP AT ALL\r\n\r\n",
        b"\r\n\r\n",
    ],
)
def test_heads_that_go_to_aiohttp(head: bytes) -> None:
    assert verdict(head) is False


def test_a_head_in_pieces_waits_then_is_taken() -> None:
    reader = HeadReader(LIMITS)
    head = CHAT + b"Host: a\r\nContent-Length: 3\r\n\r\n"
    for i in range(len(head) - 1):
        assert reader.feed(head[i : i + 1], False) is None
    got = reader.feed(head[-1:], True)
    assert isinstance(got, Head) and got.length == 3


@pytest.mark.parametrize(
    "start",
    [
        b"GET /healthz HTTP/1.1\r\nHost: a\r\nX-Slow: a",  # another route: aiohttp's at once
        b"PUT /v1/chat/completions HTTP/1.1\r\nHost: a\r\nX-Slow: a",
        b"\x16\x03\x01\x02\x00",  # garbage: llhttp refuses it first
    ],
)
def test_an_unfinished_head_goes_to_aiohttp_once_it_cannot_be_lean(start: bytes) -> None:
    assert HeadReader(LIMITS).feed(start, False) is False


def test_an_unfinished_head_past_the_size_bound_goes_to_aiohttp() -> None:
    reader = HeadReader(HeadLimits(100_000, 100_000, 1000, 1000))
    assert reader.feed(CHAT + b"X-Big: ", False) is None
    assert reader.feed(b"a" * MAX_HEAD_BYTES, False) is False


D = "Tue, 01 Dec 2026 17:20:00 GMT"


def test_response_bytes() -> None:
    assert wire.reply(200, {"x-request-id": "r"}, b"{}", False, D) == (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
        b"Date: Tue, 01 Dec 2026 17:20:00 GMT\r\nx-request-id: r\r\n\r\n{}"
    )
    assert wire.reply(429, {}, b"{}", True, D).startswith(
        b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
        b"Content-Length: 2\r\nDate: Tue, 01 Dec 2026 17:20:00 GMT\r\nConnection: close\r\n\r\n"
    )
    assert wire.stream_head({"Content-Type": "text/event-stream"}, False, D) == (
        b"HTTP/1.1 200 OK\r\nDate: Tue, 01 Dec 2026 17:20:00 GMT\r\n"
        b"Content-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    assert wire.chunk(b"data: x\n\n") == b"9\r\ndata: x\n\n\r\n"
    assert wire.chunk(b"") == b""


def test_the_date_is_rfc_9110s_of_each_second() -> None:
    assert wire.http_date(1_796_145_600.0) == D
    assert wire.http_date(1_796_145_600.9) == D
    assert wire.http_date(1_796_145_601.0) == "Tue, 01 Dec 2026 17:20:01 GMT"


def test_a_header_with_a_line_break_is_never_written() -> None:
    with pytest.raises(ValueError, match="line break"):
        wire.reply(200, {"x-a": "1\r\nx-b: 2"}, b"", False, D)
