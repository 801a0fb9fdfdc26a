"""The HTTP floor: what aiohttp alone costs for the gateway's response shape.

A server with no engine, link, admission or routing: each chat request gets a valid OpenAI
stream of `--tokens` tokens written the way the gateway writes one (headers with the first
chunk, one `send()` per further token, the last chunk with the chunked terminator). Point the
bench at it with `--cpu-pid` to read the floor under the gateway's own per-request cost:

    python -m bench.floor --tokens 32 --port 8099 &
    shardgate bench --url http://127.0.0.1:8099 --scenario W2 --cpu-pid $!
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from typing import cast

import msgspec
import uvloop
from aiohttp import web

from gateway.api.openai.encode import DONE, ChunkEncoder
from gateway.api.openai.serving import SSE_HEADERS, SSEResponse
from gateway.types import Usage


class _Body(msgspec.Struct):
    max_tokens: int = 32


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def handler(default_tokens: int) -> Handler:
    async def chat(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = msgspec.json.decode(raw, type=_Body)
        n = body.max_tokens or default_tokens
        resp = SSEResponse(headers=SSE_HEADERS)
        await resp.prepare(request)
        enc = ChunkEncoder("floor", "sim-llama", 0, "chat")
        buf = bytearray(enc.role_chunk())
        enc.token_chunk_into(buf, " tok")
        await resp.write(bytes(buf))
        transport = cast(asyncio.WriteTransport, request.transport)
        for _ in range(n - 1):
            frame = bytearray()
            enc.token_chunk_into(frame, " tok")
            transport.write(b"".join((b"%x\r\n" % len(frame), frame, b"\r\n")))
        buf = bytearray()
        enc.finish_chunk_into(buf, "length")
        enc.usage_chunk_into(buf, Usage(len(raw) // 4, n, 0))  # no tokenizer: ~4 bytes a token
        buf += DONE
        await resp.write_eof(bytes(buf))
        return resp

    return chat


async def start(port: int, tokens: int) -> tuple[web.AppRunner, int]:
    """The floor server, listening (port 0: any free one); returns it and its port."""
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler(tokens))
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, int(runner.addresses[0][1])


async def serve(port: int, tokens: int) -> None:
    _, port = await start(port, tokens)
    print(f"floor server on 127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__)
    p.add_argument("--port", type=int, default=8099)
    p.add_argument("--tokens", type=int, default=32, help="when the request names no max_tokens")
    args = p.parse_args()
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve(args.port, args.tokens))


if __name__ == "__main__":
    main()
