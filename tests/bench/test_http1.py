"""The HTTP/1.1 client's response parsing, fed raw bytes through a fake transport."""

from __future__ import annotations

import asyncio

import pytest

from bench.chunked import ChunkedDecoder, ChunkedError
from bench.http1 import Http1Connection, HttpError


class FakeTransport:
    def __init__(self) -> None:
        self.written = b""
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.written += data

    def abort(self) -> None:
        self.aborted = True


class Collect:
    def __init__(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body = b""

    def head(self, status: int, headers: dict[str, str]) -> None:
        self.status, self.headers = status, headers

    def feed(self, data: bytes, now: float) -> None:
        self.body += data


def connection() -> tuple[Http1Connection, FakeTransport]:
    conn = Http1Connection()
    t = FakeTransport()
    conn.connection_made(t)  # type: ignore[arg-type]
    return conn, t


CHUNKED_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
CHUNKED_BODY = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n"


@pytest.mark.parametrize("piece", [1, 3, 1000])
async def test_chunked_body_in_any_pieces(piece: int) -> None:
    conn, t = connection()
    sink = Collect()
    done = conn.send(b"GET / HTTP/1.1\r\n\r\n", sink)
    data = CHUNKED_HEAD + CHUNKED_BODY
    for i in range(0, len(data), piece):
        conn.data_received(data[i : i + piece])
    resp = await asyncio.wait_for(done, 1)
    assert (resp.status, resp.complete) == (200, True)
    assert sink.body == b"hello, world"
    assert sink.headers["content-type"] == "text/event-stream"
    assert t.written == b"GET / HTTP/1.1\r\n\r\n"
    assert conn.reusable and not t.aborted


async def test_content_length_body_then_keep_alive() -> None:
    conn, _ = connection()
    for body in (b'{"a": 1}', b""):
        sink = Collect()
        done = conn.send(b"GET / HTTP/1.1\r\n\r\n", sink)
        conn.data_received(b"HTTP/1.1 503 Unavailable\r\nContent-Length: %d\r\n\r\n" % len(body))
        if body:
            conn.data_received(body)
        resp = await asyncio.wait_for(done, 1)
        assert (resp.status, resp.complete, sink.body) == (503, True, body)
    assert conn.reusable


async def test_connection_lost_mid_body_is_incomplete() -> None:
    conn, _ = connection()
    sink = Collect()
    done = conn.send(b"GET / HTTP/1.1\r\n\r\n", sink)
    conn.data_received(CHUNKED_HEAD + b"5\r\nhel")
    conn.connection_lost(None)
    resp = await asyncio.wait_for(done, 1)
    assert (resp.status, resp.complete, sink.body) == (200, False, b"hel")
    assert not conn.reusable


async def test_connection_close_is_not_reused() -> None:
    conn, t = connection()
    done = conn.send(b"GET / HTTP/1.1\r\n\r\n", Collect())
    conn.data_received(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
    assert (await asyncio.wait_for(done, 1)).complete
    assert not conn.reusable and t.aborted


@pytest.mark.parametrize(
    "data",
    [
        b"SPDY/3 200 OK\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        CHUNKED_HEAD + b"zz\r\nhello\r\n",
        CHUNKED_HEAD + b"2\r\nhello\r\n",
    ],
)
async def test_malformed_responses_raise(data: bytes) -> None:
    conn, t = connection()
    done = conn.send(b"GET / HTTP/1.1\r\n\r\n", Collect())
    conn.data_received(data)
    with pytest.raises(HttpError):
        await asyncio.wait_for(done, 1)
    assert t.aborted


async def test_closed_before_the_head() -> None:
    conn, _ = connection()
    done = conn.send(b"GET / HTTP/1.1\r\n\r\n", Collect())
    conn.connection_lost(None)
    with pytest.raises(HttpError):
        await asyncio.wait_for(done, 1)


def test_chunked_decoder_trailers_and_data_after_the_end() -> None:
    d = ChunkedDecoder()
    assert d.feed(b"3\r\nabc\r\n0\r\nX-Trailer: 1\r\n") == (b"abc", False)
    assert d.feed(b"\r\n") == (b"", True)
    with pytest.raises(ChunkedError):
        d.feed(b"1\r\n")
