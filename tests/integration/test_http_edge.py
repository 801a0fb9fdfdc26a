"""The HTTP edge's limits, over raw sockets against a real gateway: slow heads and bodies, idle
keep-alive connections, oversized heads, protocol garbage, deeply nested JSON; with aiohttp
alone and with the lean path for the streaming routes in front of it."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from engine_sidecar.backends.sim import SimConfig
from tests.integration.cluster import Cluster

# Short limits, so that a test waits a fraction of a second for each to pass.
EDGE_YAML = """
gateway:
  max_body_bytes: 65536
  default_max_tokens: 4
  client_header_timeout_s: 0.5
  client_body_timeout_s: 0.5
  keepalive_timeout_s: 1.0
  max_header_field_bytes: 1024
  max_headers: 20
"""

# Long enough for any limit above to pass many times over; a test fails when it runs out.
DEADLINE_S = 10.0

CHAT = json.dumps(
    {"model": "sim-llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
).encode()


@pytest.fixture(scope="module", params=["aiohttp", "lean"])
def edge(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """Every test against both HTTP paths: aiohttp's alone, and the lean path in front of it
    (gateway.lean_http: the same refusals, whichever path reads the request)."""
    sim = SimConfig(model="sim-llama", profile="instant", max_model_len=512)
    lean = "true" if request.param == "lean" else "false"
    c = Cluster(EDGE_YAML + f"  lean_http: {lean}\n", [{"sim": sim}])
    c.start()
    yield c
    c.stop()


def port(c: Cluster) -> int:
    assert c.gateway is not None
    return c.gateway.http_port


def protocol_errors(c: Cluster, kind: str) -> float:
    with urllib.request.urlopen(f"{c.http_url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    m = re.search(rf'^shardgate_http_protocol_errors_total{{kind="{kind}"}} (\S+)$', text, re.M)
    assert m is not None, f"no protocol error series for {kind}"
    return float(m[1])


class Reply:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def error(self) -> dict[str, Any]:
        assert self.headers.get("content-type", "").startswith("application/json"), self.headers
        err: dict[str, Any] = json.loads(self.body)["error"]
        assert err["code"] == self.status
        return err


async def read_reply(reader: asyncio.StreamReader) -> Reply:
    """One HTTP/1.1 response with a Content-Length body."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Reply(status, headers, body)


async def closed(reader: asyncio.StreamReader) -> bool:
    """True once the gateway has closed the connection (EOF, or reset by it)."""
    try:
        return await reader.read(65536) == b""
    except ConnectionResetError:
        return True


async def connect(c: Cluster) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port(c))


async def request(c: Cluster, raw: bytes) -> Reply:
    reader, writer = await connect(c)
    try:
        async with asyncio.timeout(DEADLINE_S):
            writer.write(raw)
            return await read_reply(reader)
    finally:
        writer.close()


async def trickle_head(c: Cluster, first: bytes = b"") -> Reply | None:
    """Send a request head one byte every 50 ms for at most DEADLINE_S, after `first` (a whole
    request whose reply is read first). Returns what the gateway answered once it closed the
    connection (None if it closed it without a word)."""
    reader, writer = await connect(c)
    try:
        async with asyncio.timeout(DEADLINE_S + 5):
            if first:
                writer.write(first)
                assert (await read_reply(reader)).status == 200
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: edge\r\nX-Slow: ")
            waiting = asyncio.ensure_future(reader.read(65536))
            loop = asyncio.get_running_loop()
            end = loop.time() + DEADLINE_S
            while not waiting.done() and loop.time() < end:
                try:
                    writer.write(b"a")
                    await writer.drain()
                except ConnectionError:
                    break
                await asyncio.wait([waiting], timeout=0.05)
            if not waiting.done():
                waiting.cancel()
                raise AssertionError("the gateway kept a trickling head open")
            try:
                data = bytearray(waiting.result())
                while more := await reader.read(65536):
                    data += more
            except ConnectionResetError:
                pass
            if not data:
                return None
            rest = asyncio.StreamReader()
            rest.feed_data(bytes(data))
            rest.feed_eof()
            return await read_reply(rest)
    finally:
        writer.close()


# -- the request head --------------------------------------------------------------------------
async def test_trickled_heads_get_408_and_are_closed(edge: Cluster) -> None:
    before = protocol_errors(edge, "header_timeout")
    results = await asyncio.gather(*(trickle_head(edge) for _ in range(20)))
    for reply in results:
        assert reply is not None, "closed without a 408"
        assert reply.status == 408
        assert reply.headers["connection"] == "close"
        err = reply.error()
        assert err["type"] == "timeout"
        assert "request head" in err["message"]
    assert protocol_errors(edge, "header_timeout") == before + 20


async def test_trickled_head_after_a_request_on_a_kept_alive_connection_gets_408(
    edge: Cluster,
) -> None:
    reply = await trickle_head(edge, first=b"GET /healthz HTTP/1.1\r\nHost: edge\r\n\r\n")
    assert reply is not None and reply.status == 408
    assert reply.error()["type"] == "timeout"


async def test_idle_keep_alive_connection_is_closed(edge: Cluster) -> None:
    reader, writer = await connect(edge)
    try:
        async with asyncio.timeout(DEADLINE_S):
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: edge\r\n\r\n")
            reply = await read_reply(reader)
            assert reply.status == 200
            assert reply.headers.get("connection", "keep-alive").lower() != "close"
            assert await closed(reader)  # nothing sent after the reply: the idle timer closes
    finally:
        writer.close()


async def test_request_split_across_reads_is_served(edge: Cluster) -> None:
    """The timers cut slow clients only: a head and a body that arrive in pieces, each gap
    under the limits, get their answer."""
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: edge\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(CHAT)}\r\n\r\n"
    ).encode()
    reader, writer = await connect(edge)
    try:
        async with asyncio.timeout(DEADLINE_S):
            for piece in (head[:20], head[20:], CHAT[:10], CHAT[10:]):
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0.05)
            reply = await read_reply(reader)
    finally:
        writer.close()
    assert reply.status == 200, reply.body
    assert json.loads(reply.body)["choices"][0]["message"]["content"]


# -- the request body --------------------------------------------------------------------------
@pytest.mark.parametrize("sent", [b"", b'{"model": "sim-llama", '])
async def test_body_that_stops_arriving_gets_408_and_is_closed(edge: Cluster, sent: bytes) -> None:
    before = protocol_errors(edge, "body_timeout")
    reader, writer = await connect(edge)
    try:
        async with asyncio.timeout(DEADLINE_S):
            writer.write(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: edge\r\n"
                b"Content-Type: application/json\r\nContent-Length: 200\r\n\r\n" + sent
            )
            reply = await read_reply(reader)
            assert reply.status == 408
            assert reply.headers["connection"] == "close"
            err = reply.error()
            assert err["type"] == "timeout"
            assert "body" in err["message"]
            assert await closed(reader)
    finally:
        writer.close()
    assert protocol_errors(edge, "body_timeout") == before + 1


@pytest.mark.parametrize("split", [False, True], ids=["one-write", "head-then-chunks"])
async def test_broken_chunked_body_is_400(edge: Cluster, split: bool) -> None:
    """Whether the broken chunk arrives with the head or while the body is being read."""
    before = protocol_errors(edge, "bad_body") + protocol_errors(edge, "bad_header")
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\n"
        b'Transfer-Encoding: chunked\r\n\r\n5\r\n{"mod\r\n'
    )
    reader, writer = await connect(edge)
    try:
        async with asyncio.timeout(DEADLINE_S):
            if split:
                writer.write(head)
                await writer.drain()
                await asyncio.sleep(0.1)  # under the body timeout: the chunk is what fails
                writer.write(b"zz\r\n")
            else:
                writer.write(head + b"zz\r\n")
            reply = await read_reply(reader)
            assert await closed(reader)
    finally:
        writer.close()
    assert reply.status == 400
    err = reply.error()
    assert err["type"] == "invalid_request_error"
    assert "chunk" in err["message"]
    assert protocol_errors(edge, "bad_body") + protocol_errors(edge, "bad_header") == before + 1


# -- oversized heads and protocol garbage --------------------------------------------------------
@pytest.mark.parametrize(
    "raw",
    [
        b"GET /healthz HTTP/1.1\r\nHost: edge\r\nX-Big: " + b"a" * 2000 + b"\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: edge\r\n"
        + b"".join(b"X-H%d: v\r\n" % i for i in range(25))
        + b"\r\n",
        b"GET /healthz?" + b"q" * 9000 + b" HTTP/1.1\r\nHost: edge\r\n\r\n",
    ],
    ids=["long-field", "many-fields", "long-request-line"],
)
async def test_oversized_head_is_431(edge: Cluster, raw: bytes) -> None:
    before = protocol_errors(edge, "headers_too_large")
    reply = await request(edge, raw)
    assert reply.status == 431
    assert reply.error()["type"] == "invalid_request_error"
    assert protocol_errors(edge, "headers_too_large") == before + 1


@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        (b"NOT HTTP AT ALL\r\n\r\n", "bad_request_line"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", "bad_request_line"),
        (b"GET /healthz HTTP/1.1\r\nHost: edge\r\nBad Header\r\n\r\n", "bad_header"),
        (
            b"POST /v1/completions HTTP/1.1\r\nHost: edge\r\n"
            b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
            "bad_header",
        ),
    ],
    ids=["words", "tls-hello", "no-colon", "two-lengths"],
)
async def test_protocol_error_is_400_counted_and_logged_once_at_info(
    edge: Cluster, raw: bytes, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    before = protocol_errors(edge, kind)
    with caplog.at_level(logging.DEBUG):
        reply = await request(edge, raw)
    assert reply.status == 400
    assert reply.error()["type"] == "invalid_request_error"
    assert protocol_errors(edge, kind) == before + 1
    ours = [r for r in caplog.records if r.name == "gateway.api.http"]
    assert len(ours) == 1
    (record,) = ours
    assert record.levelno == logging.INFO
    assert record.exc_info is None
    assert getattr(record, "kind", None) == kind
    assert "\n" not in record.getMessage() + str(getattr(record, "detail", ""))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


# -- the JSON body -------------------------------------------------------------------------------
@pytest.mark.parametrize("opener", [b"[", b'{"a":'])
async def test_deeply_nested_json_is_400(edge: Cluster, opener: bytes) -> None:
    closer = b"]" if opener == b"[" else b"}"
    body = (
        b'{"model": "sim-llama", "messages": [{"role": "user", "content": "hi"}], "extra": '
        + opener * 10_000
        + (b"1" if opener != b"[" else b"")
        + closer * 10_000
        + b"}"
    )
    reply = await request(
        edge,
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body) + body,
    )
    assert reply.status == 400
    err = reply.error()
    assert err["type"] == "invalid_request_error"
    assert "too deeply" in err["message"]


async def test_body_that_does_not_decode_is_400(edge: Cluster) -> None:
    before = protocol_errors(edge, "bad_body")
    reply = await request(
        edge,
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: edge\r\nContent-Encoding: gzip\r\n"
        b"Content-Length: %d\r\n\r\n" % len(CHAT) + CHAT,
    )
    assert reply.status == 400
    err = reply.error()
    assert err["type"] == "invalid_request_error"
    assert "gzip" in err["message"]
    assert protocol_errors(edge, "bad_body") == before + 1


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/no/such/route"])
async def test_unknown_expectation_is_417_as_json(edge: Cluster, path: str) -> None:
    """aiohttp answers Expect before any middleware runs; the answer is JSON all the same."""
    reply = await request(
        edge,
        b"POST %s HTTP/1.1\r\nHost: edge\r\nExpect: teapot\r\nContent-Length: %d\r\n\r\n"
        % (path.encode(), len(CHAT))
        + CHAT,
    )
    assert reply.status == 417
    assert reply.error()["type"] == "invalid_request_error"


# -- Anthropic's routes: the same refusals, in Anthropic's error shape ---------------------------
MESSAGES = json.dumps(
    {"model": "sim-llama", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
).encode()
DEEP = b'{"model": "sim-llama", "extra": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"


@pytest.mark.parametrize(
    ("raw", "status", "kind", "words"),
    [
        (b"POST /v1/messages HTTP/1.1\r\nHost: edge\r\nContent-Length: %d\r\n\r\n%s"
         % (len(DEEP), DEEP), 400, "invalid_request_error", "too deeply"),
        (b"POST /v1/messages HTTP/1.1\r\nHost: edge\r\nContent-Encoding: gzip\r\n"
         b"Content-Length: %d\r\n\r\n%s" % (len(MESSAGES), MESSAGES),
         400, "invalid_request_error", "gzip"),
        (b"POST /v1/messages/count_tokens HTTP/1.1\r\nHost: edge\r\nContent-Length: 1000000\r\n"
         b"\r\n", 413, "request_too_large", "limit"),
        (b"GET /v1/messages HTTP/1.1\r\nHost: edge\r\n\r\n", 405, "invalid_request_error",
         "Method"),
        (b"POST /v1/messages/nope HTTP/1.1\r\nHost: edge\r\nContent-Length: 0\r\n\r\n", 404,
         "not_found_error", "Not Found"),
        (b"POST /v1/messages HTTP/1.1\r\nHost: edge\r\nExpect: 100-pigeons\r\n"
         b"Content-Length: %d\r\n\r\n%s" % (len(MESSAGES), MESSAGES),
         417, "invalid_request_error", "unknown expect"),
    ],
    ids=["deep-json", "undecodable-body", "too-large", "wrong-method", "no-route", "expect"],
)  # fmt: skip
async def test_messages_routes_refuse_in_anthropics_shape(
    edge: Cluster, raw: bytes, status: int, kind: str, words: str
) -> None:
    reply = await request(edge, raw)
    assert reply.status == status, reply.body
    assert reply.headers.get("content-type", "").startswith("application/json")
    body = json.loads(reply.body)
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == kind
    assert words.lower() in body["error"]["message"].lower()
