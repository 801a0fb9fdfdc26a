"""The lean HTTP path (gateway.lean_http) against a real gateway: which requests it serves and
which go to aiohttp on the same connection, keep-alive and pipelining, the openai SDK through
it, its own head limits, and clients that leave mid-answer. (The edge's bad-input corpus, slow
clients and the fuzz target run against both paths in their own modules.)

Which path answered: aiohttp names itself in a `Server` header, the lean path sends none."""

from __future__ import annotations

import asyncio
import email.utils
import gzip
import json
from collections.abc import Iterator

import httpx
import openai
import pytest

from engine_sidecar.backends.sim import SimConfig
from tests.integration.cluster import Cluster
from tests.integration.poll import until
from tests.integration.test_cancellation import connect as connect_http
from tests.integration.test_cancellation import running
from tests.integration.test_http_edge import (
    DEADLINE_S,
    Reply,
    closed,
    protocol_errors,
    read_reply,
)

LEAN_YAML = """
gateway:
  lean_http: true
  default_max_tokens: 8
  client_header_timeout_s: 0.5
  client_body_timeout_s: 0.5
  max_header_field_bytes: 1024
  max_headers: 20
"""
LONG = {"max_tokens": 3000, "ignore_eos": True}


def chat(**extra: object) -> bytes:
    body = {"model": "sim-llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    return json.dumps({**body, **extra}).encode()


def post(path: str, body: bytes, *headers: bytes) -> bytes:
    fields = b"".join(h + b"\r\n" for h in headers)
    return (
        b"POST %s HTTP/1.1\r\nHost: lean\r\nContent-Type: application/json\r\n"
        b"%bContent-Length: %d\r\n\r\n%b" % (path.encode(), fields, len(body), body)
    )


HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: lean\r\n\r\n"


@pytest.fixture(scope="module")
def lean() -> Iterator[Cluster]:
    sim = SimConfig(model="sim-llama", profile="fast", max_model_len=4096)
    c = Cluster(LEAN_YAML, [{"sim": sim}])
    c.start()
    yield c
    c.stop()


def by_aiohttp(reply: Reply) -> bool:
    return "aiohttp" in reply.headers.get("server", "")


async def exchange(c: Cluster, *raws: bytes, replies: int | None = None) -> list[Reply]:
    """Writes each request in turn on one connection (all at once: pipelined), then reads
    `replies` answers (one per request by default)."""
    assert c.gateway is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", c.gateway.http_port)
    try:
        async with asyncio.timeout(DEADLINE_S):
            writer.write(b"".join(raws))
            return [await read_reply(reader) for _ in range(replies or len(raws))]
    finally:
        writer.close()


async def test_the_streaming_routes_are_lean_and_the_rest_goes_to_aiohttp(lean: Cluster) -> None:
    """On one kept-alive connection: the lean path answers until a request it does not take;
    aiohttp answers that one and everything after it on that connection."""
    assert lean.gateway is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", lean.gateway.http_port)
    replies = []
    try:
        async with asyncio.timeout(DEADLINE_S):
            for raw in (
                post("/v1/chat/completions", chat(), b"x-request-id: mine-1"),
                post("/v1/completions", json.dumps({"model": "sim-llama", "prompt": "a"}).encode()),
                HEALTHZ,
                post("/v1/chat/completions", chat()),
            ):
                writer.write(raw)
                replies.append(await read_reply(reader))
    finally:
        writer.close()
    assert [r.status for r in replies] == [200, 200, 200, 200]
    assert [by_aiohttp(r) for r in replies] == [False, False, True, True]
    first = json.loads(replies[0].body)
    assert first["object"] == "chat.completion" and first["choices"][0]["message"]["content"]
    assert replies[0].headers["x-request-id"] == "mine-1"
    for r in replies:  # a Date on every answer, as aiohttp gives one (RFC 9110 6.6.1)
        assert email.utils.parsedate_to_datetime(r.headers["date"]).tzinfo is not None
    assert json.loads(replies[1].body)["object"] == "text_completion"
    same = {"id": "", "created": 0}
    assert json.loads(replies[3].body) | same == first | same


async def test_pipelined_requests_are_answered_in_order(lean: Cluster) -> None:
    raws = [
        post("/v1/chat/completions", chat(), b"x-request-id: p-1"),
        post("/v1/chat/completions", chat(model="nope"), b"x-request-id: p-2"),
        post("/v1/chat/completions", chat(), b"x-request-id: p-3"),
        HEALTHZ,
    ]
    replies = await exchange(lean, *raws)
    assert [r.status for r in replies] == [200, 404, 200, 200]
    assert [r.headers.get("x-request-id") for r in replies[:3]] == ["p-1", "p-2", "p-3"]
    assert replies[1].error()["type"] == "not_found_error"
    assert [by_aiohttp(r) for r in replies] == [False, False, False, True]


async def test_connection_close_is_answered_and_the_connection_closed(lean: Cluster) -> None:
    assert lean.gateway is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", lean.gateway.http_port)
    try:
        async with asyncio.timeout(DEADLINE_S):
            writer.write(post("/v1/chat/completions", chat(), b"Connection: close"))
            reply = await read_reply(reader)
            assert await closed(reader)
    finally:
        writer.close()
    assert reply.status == 200 and not by_aiohttp(reply)
    assert reply.headers["connection"] == "close"


@pytest.mark.parametrize(
    "extra",
    [
        b"X-Big: " + b"a" * 2000,
        b"".join(b"X-H%d: v\r\n" % i for i in range(25)).rstrip(b"\r\n"),
    ],
    ids=["long-field", "many-fields"],
)
async def test_oversized_heads_on_the_lean_routes_are_431(lean: Cluster, extra: bytes) -> None:
    before = protocol_errors(lean, "headers_too_large")
    (reply,) = await exchange(lean, post("/v1/chat/completions", chat(), extra))
    assert reply.status == 431
    assert reply.error()["type"] == "invalid_request_error"
    assert protocol_errors(lean, "headers_too_large") == before + 1


async def test_a_trickled_lean_head_gets_408(lean: Cluster) -> None:
    before = protocol_errors(lean, "header_timeout")
    assert lean.gateway is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", lean.gateway.http_port)
    try:
        async with asyncio.timeout(DEADLINE_S):
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: lean\r\nX-Slow: ")
            while not reader.at_eof() and not reader._buffer:  # (what the gateway sent)
                writer.write(b"a")
                await writer.drain()
                await asyncio.sleep(0.05)
            reply = await read_reply(reader)
    finally:
        writer.close()
    assert reply.status == 408 and reply.headers["connection"] == "close"
    assert reply.error()["type"] == "timeout"
    assert protocol_errors(lean, "header_timeout") == before + 1


async def test_expect_100_continue_goes_to_aiohttp(lean: Cluster) -> None:
    assert lean.gateway is not None
    body = chat()
    reader, writer = await asyncio.open_connection("127.0.0.1", lean.gateway.http_port)
    try:
        async with asyncio.timeout(DEADLINE_S):
            head = post("/v1/chat/completions", body, b"Expect: 100-continue")
            writer.write(head[: head.index(b"\r\n\r\n") + 4])
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 100")
            writer.write(body)
            reply = await read_reply(reader)
    finally:
        writer.close()
    assert reply.status == 200 and by_aiohttp(reply)


@pytest.mark.parametrize(
    "raw",
    [
        post("/v1/chat/completions", chat()).replace(b"HTTP/1.1", b"HTTP/1.0", 1),
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: lean\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n%b\r\n0\r\n\r\n" % (len(chat()), chat()),
        post("/v1/chat/completions", gzip.compress(chat()), b"Content-Encoding: gzip"),
        post("/v1/chat/completions?x=1", chat(), b"X-A: 1", b"x-a: 2"),
    ],
    ids=["http-1.0", "chunked-body", "gzip-body", "repeated-header"],
)
async def test_requests_the_lean_path_leaves_are_served_by_aiohttp(
    lean: Cluster, raw: bytes
) -> None:
    (reply,) = await exchange(lean, raw)
    assert reply.status == 200, reply.body
    assert by_aiohttp(reply)
    assert json.loads(reply.body)["choices"][0]["message"]["content"]


def test_the_openai_sdk_through_the_lean_path(lean: Cluster) -> None:
    client = openai.OpenAI(base_url=f"{lean.http_url}/v1", api_key="none", max_retries=0)
    messages: list[openai.types.chat.ChatCompletionMessageParam] = [
        {"role": "user", "content": "Tell me a story."}
    ]
    raw = client.chat.completions.with_raw_response.create(
        model="sim-llama", messages=messages, max_tokens=12, seed=7
    )
    assert "server" not in raw.headers  # the lean path's answer
    unary = raw.parse()
    with client.chat.completions.with_streaming_response.create(
        model="sim-llama",
        messages=messages,
        max_tokens=12,
        seed=7,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"x-shardgate-resumable": "true"},  # (a header the lean path keeps)
    ) as resp:
        assert "server" not in resp.headers
        assert resp.headers["x-shardgate-stream-id"]
        chunks = list(resp.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == unary.choices[0].message.content
    assert chunks[-1].usage is not None and unary.usage is not None
    assert chunks[-1].usage.completion_tokens == unary.usage.completion_tokens == 12
    done = client.completions.create(model="sim-llama", prompt="Once", max_tokens=5, seed=3)
    streamed = client.completions.create(
        model="sim-llama", prompt="Once", max_tokens=5, seed=3, stream=True
    )
    assert "".join(c.choices[0].text for c in streamed) == done.choices[0].text


def test_a_client_that_leaves_mid_stream_aborts_its_engine_request(lean: Cluster) -> None:
    until(lambda: running(lean) == 0, 10.0, "the engine is idle")
    body = {"model": "sim-llama", "prompt": "a long story", "stream": True, **LONG}
    conn = connect_http(lean, body, 30)
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("server") is None
    events = [line for line in (resp.readline() for _ in range(20)) if line.startswith(b"data:")]
    assert events
    assert running(lean) == 1
    conn.close()
    until(lambda: running(lean) == 0, 5.0, "the engine request was aborted")


def test_a_client_that_leaves_a_unary_request_aborts_it(lean: Cluster) -> None:
    until(lambda: running(lean) == 0, 10.0, "the engine is idle")
    conn = connect_http(lean, {"model": "sim-llama", "prompt": "a long story", **LONG}, 0.5)
    with pytest.raises(TimeoutError):
        conn.getresponse()
    until(lambda: running(lean) == 1, 5.0, "the request runs")
    conn.close()
    until(lambda: running(lean) == 0, 5.0, "the engine request was aborted")


def test_a_stream_in_flight_finishes_when_the_gateway_stops() -> None:
    """Graceful stop: the lean connection's answer goes out whole, then it closes."""
    c = Cluster(LEAN_YAML, [{"sim": SimConfig(model="sim-llama", profile="fast")}])
    c.start()
    try:
        body = {"model": "sim-llama", "prompt": "a story", "stream": True, **LONG}
        body["max_tokens"] = 400
        with httpx.stream("POST", f"{c.http_url}/v1/completions", json=body, timeout=30) as r:
            assert r.status_code == 200 and "server" not in r.headers
            lines = r.iter_lines()
            assert next(line for line in lines if line.startswith("data:"))
            assert c.gateway is not None and c._loop is not None
            stopping = asyncio.run_coroutine_threadsafe(c.gateway.stop(30.0), c._loop)
            rest = [line for line in lines if line.startswith("data:")]
            stopping.result(30)
    finally:
        c.stop()
    assert rest[-1] == "data: [DONE]"
    assert json.loads(rest[-2][6:])["choices"][0]["finish_reason"] == "length"
