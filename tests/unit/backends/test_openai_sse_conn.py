"""The openai backend's streamed calls (sse_conn.py) against scripted HTTP servers on 127.0.0.1:
events cut anywhere, kept connections, refusals, stalls, servers that close, the pool's bound.
Run on asyncio's loop and on uvloop's (their transports differ)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import uvloop

from engine_sidecar.backends.openai.client import EngineClient, ServerRefused
from engine_sidecar.backends.openai.config import OpenAIConfig
from engine_sidecar.backends.openai.pool import Pool
from engine_sidecar.backends.openai.sse_conn import DONE, MORE, STOP
from tests.integration.poll import until_async

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
TIMEOUTS = (5.0, 5.0, 5.0, 30.0)


LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


def on_both_loops(test: Callable[[], Awaitable[None]]) -> Callable[[str], None]:
    """The test, run on each event loop in turn."""

    @pytest.mark.parametrize("loop", sorted(LOOPS))
    def run(loop: str) -> None:
        with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
            runner.run(asyncio.wait_for(test(), 30))

    run.__name__ = test.__name__
    return run


class Server:
    """Answers each request on a connection with the script; counts connections."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[bytes] = []
        self.closed = asyncio.Event()  # a client closed its connection
        self.port = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                self.requests.append(head + await reader.readexactly(length))
                await self.script(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed.set()
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def serving(script: Script) -> AsyncIterator[Server]:
    s = Server(script)
    srv = await asyncio.start_server(s.serve, "127.0.0.1", 0)
    s.port = srv.sockets[0].getsockname()[1]
    try:
        yield s
    finally:
        srv.close()


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def events(*payloads: bytes) -> bytes:
    return b"".join(b"data: " + p + b"\n\n" for p in payloads)


def collect(into: list[bytes], stop_at: bytes = b"", verdict: int = DONE) -> Callable[[bytes], int]:
    def handler(payload: bytes) -> int:
        into.append(payload)
        return verdict if payload == stop_at else MORE

    return handler


async def whole_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    body = events(b'{"a": 1}', b'{"b": 2}', b"[DONE]")
    writer.write(HEAD + chunk(body) + b"0\r\n\r\n")
    await writer.drain()


@on_both_loops
async def test_events_cut_at_every_byte_reach_the_handler_whole() -> None:
    body = events(b'{"text": "one"}', b'{"text": "two\\u00e9"}', b"[DONE]")
    wire = HEAD + chunk(body[:7]) + chunk(body[7:30]) + chunk(body[30:]) + b"0\r\n\r\n"

    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for i in range(len(wire)):
            writer.write(wire[i : i + 1])
            await writer.drain()
            await asyncio.sleep(0)

    async with serving(trickle) as s:
        pool = Pool(f"http://127.0.0.1:{s.port}", {}, 4, 5.0)
        got: list[bytes] = []
        call = await pool.call("/v1/completions", {"x": 1}, collect(got), TIMEOUTS)
        await call.ended
        assert got == [b'{"text": "one"}', b'{"text": "two\\u00e9"}']
        assert s.requests[0].startswith(b"POST /v1/completions HTTP/1.1\r\n")
        assert s.requests[0].endswith(b'\r\n\r\n{"x":1}')
        pool.close()


@on_both_loops
async def test_a_finished_call_leaves_its_connection_to_the_next() -> None:
    async with serving(whole_stream) as s:
        pool = Pool(f"http://127.0.0.1:{s.port}/prefix", {"Authorization": "Bearer k"}, 4, 5.0)
        for _ in range(3):
            got: list[bytes] = []
            call = await pool.call("/v1/x", {}, collect(got, b'{"b": 2}'), TIMEOUTS)
            await call.ended
            call.close()  # (what the client does once the handler is done)
            assert got == [b'{"a": 1}', b'{"b": 2}']
            await until_async(lambda: pool.idle == 1, what="the [DONE] read, the connection kept")
        assert s.connections == 1
        assert all(r.startswith(b"POST /prefix/v1/x ") for r in s.requests)
        assert b"Authorization: Bearer k\r\n" in s.requests[0]
        pool.close()


@on_both_loops
async def test_a_handler_that_stops_closes_the_connection() -> None:
    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD)
        with contextlib.suppress(ConnectionError):
            while True:
                writer.write(chunk(events(b'{"t": 1}')))
                await writer.drain()
                await asyncio.sleep(0.01)

    async with serving(endless) as s:
        pool = Pool(f"http://127.0.0.1:{s.port}", {}, 4, 5.0)
        got: list[bytes] = []
        call = await pool.call("/", {}, collect(got, b'{"t": 1}', STOP), TIMEOUTS)
        await call.ended
        call.close()
        async with asyncio.timeout(5):
            await s.closed.wait()
        assert got == [b'{"t": 1}']
        pool.close()


@on_both_loops
async def test_an_error_status_is_a_refusal_with_the_servers_message() -> None:
    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = b'{"error": {"message": "max_tokens is too large", "param": "max_tokens"}}'
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()

    async with serving(refuse) as s:
        client = EngineClient(OpenAIConfig(model="m", base_url=f"http://127.0.0.1:{s.port}"))
        with pytest.raises(ServerRefused) as e:
            await client.stream("/v1/completions", {}, collect([]))
        assert (e.value.status, e.value.message, e.value.param) == (
            400,
            "max_tokens is too large",
            "max_tokens",
        )
        await client.close()


@on_both_loops
async def test_a_stalled_stream_times_out_and_a_closed_one_is_reset() -> None:
    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD + chunk(events(b'{"t": 1}')))
        await writer.drain()
        await asyncio.sleep(30)

    async def die(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD + chunk(events(b'{"t": 1}')))
        await writer.drain()
        writer.transport.abort()

    async with serving(stall) as s:
        pool = Pool(f"http://127.0.0.1:{s.port}", {}, 4, 5.0)
        got: list[bytes] = []
        call = await pool.call("/", {}, collect(got), (60.0, 0.2, 60.0, 120.0))
        with pytest.raises(TimeoutError):
            await call.ended
        assert got == [b'{"t": 1}']
        pool.close()
    async with serving(die) as s:
        pool = Pool(f"http://127.0.0.1:{s.port}", {}, 4, 5.0)
        call = await pool.call("/", {}, collect([]), TIMEOUTS)
        with pytest.raises(ConnectionResetError):
            await call.ended
        pool.close()


@on_both_loops
async def test_a_stream_without_chunks_and_a_handler_that_fails() -> None:
    async def plain(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = events(b"bad", b"[DONE]")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()

    def fails(payload: bytes) -> int:
        raise ValueError(payload.decode())

    async with serving(plain) as s:
        pool = Pool(f"http://127.0.0.1:{s.port}", {}, 4, 5.0)
        call = await pool.call("/", {}, fails, TIMEOUTS)
        with pytest.raises(ValueError, match="bad"):
            await call.ended
        pool.close()


@on_both_loops
async def test_the_pool_holds_at_most_its_limit_of_connections() -> None:
    release = asyncio.Event()

    async def held(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await release.wait()
        await whole_stream(reader, writer)

    async with serving(held) as s:
        pool = Pool(f"http://127.0.0.1:{s.port}", {}, 1, 5.0)
        first = await pool.call("/", {}, collect([]), TIMEOUTS)
        second = asyncio.create_task(pool.call("/", {}, collect([]), TIMEOUTS))
        await until_async(lambda: pool.waiting == 1, what="the second call waits for a slot")
        assert not second.done() and s.connections == 1
        release.set()
        await first.ended
        await (await second).ended
        assert s.connections == 1
        pool.close()


@on_both_loops
async def test_a_kept_connection_the_server_closes_as_it_is_reused_is_not_a_failure() -> None:
    answered: set[asyncio.StreamWriter] = set()

    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if writer in answered:  # (its keep-alive ran out as the request came: no answer)
            writer.transport.abort()
            raise ConnectionError
        answered.add(writer)
        await whole_stream(reader, writer)

    async with serving(once) as s:
        client = EngineClient(OpenAIConfig(model="m", base_url=f"http://127.0.0.1:{s.port}"))
        for _ in range(2):
            got: list[bytes] = []
            await client.stream("/", {}, collect(got))
            assert got == [b'{"a": 1}', b'{"b": 2}']
            kept = lambda: client._pool is not None and client._pool.idle == 1  # noqa: E731
            await until_async(kept, what="its [DONE] read, the connection kept")
        assert s.connections == 2 and len(s.requests) == 3
        await client.close()
