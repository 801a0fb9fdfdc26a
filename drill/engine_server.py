"""A small OpenAI-compatible engine server: what the openai backend fronts in drills (the
engine-kill case), in its failure tests and in its bench.

Deterministic like the sim: each next token is a function of the whole context (prompt and the
tokens so far), so a request resumed from prompt + generated ids goes on exactly as an
uninterrupted one. Words are tokens (`w17` is token 17). Streams write one token per write.
It can stop answering (`hang`: every handler waits) or die (`kill`: the listening socket and
every connection closed at once, as a killed process's).
"""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import Sequence
from typing import Any

from aiohttp import web

VOCAB = 1000
MODEL = "fake-llm"


def word_id(word: str) -> int:
    if word.startswith("w") and word[1:].isdigit() and int(word[1:]) < VOCAB:
        return int(word[1:])
    return zlib.crc32(word.encode()) % (VOCAB - 10) + 10


def encode(text: str) -> list[int]:
    return [word_id(w) for w in text.split()]


def next_token(context: Sequence[int]) -> int:
    return (sum(context) * 7 + len(context) * 13) % (VOCAB - 10) + 10


def piece(token: int) -> str:
    return f" w{token}"


def chat_ids(messages: list[dict[str, Any]]) -> list[int]:
    return encode(" ".join(f"{m['role']}: {m['content']}" for m in messages) + " assistant:")


class FakeEngineServer:
    def __init__(
        self,
        *,
        token_ids: bool = True,
        token_delay_s: float = 0.0,
        port: int = 0,
        api_key: str | None = None,
    ) -> None:
        """`api_key`: the /v1 routes want it as a Bearer token (as `vllm serve --api-key`)."""
        self.token_ids = token_ids
        self.token_delay_s = token_delay_s
        self.running = 0
        self.client_gone = 0  # streams whose client left before the end
        self.bodies: list[dict[str, Any]] = []  # of the generation requests, in order
        self._hung = asyncio.Event()
        self._release = asyncio.Event()
        self._transports: set[asyncio.Transport] = set()
        self.api_key = api_key
        app = web.Application(middlewares=[self._auth])
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_post("/detokenize", self._detokenize)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        self._site: web.TCPSite | None = None
        self.port = port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        await self._runner.setup()
        # (the listen backlog of vLLM's own server, uvicorn's: a burst of new connections is
        # not dropped to a one-second SYN retry)
        self._site = web.TCPSite(self._runner, "127.0.0.1", self.port, backlog=2048)
        await self._site.start()
        self.port = self._runner.addresses[0][1]

    def hang(self) -> None:
        """Stop answering: requests are taken and never answered (a wedged server)."""
        self._hung.set()

    async def kill(self) -> None:
        """Die: stop listening and drop every connection, mid-stream or not."""
        if self._site is not None:
            await self._site.stop()
            self._site = None
        for t in list(self._transports):
            t.abort()

    async def stop(self) -> None:
        self._release.set()
        await self.kill()
        await self._runner.cleanup()

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        wanted = f"Bearer {self.api_key}"
        if (
            self.api_key
            and request.path.startswith("/v1")
            and (request.headers.get("Authorization") != wanted)
        ):
            return web.json_response({"error": {"message": "Unauthorized"}}, status=401)
        response: web.StreamResponse = await handler(request)
        return response

    async def _gate(self, request: web.Request) -> None:
        if request.transport is not None:
            self._transports.add(request.transport)
        if self._hung.is_set():
            await self._release.wait()

    async def _health(self, request: web.Request) -> web.Response:
        await self._gate(request)
        return web.Response()

    async def _metrics(self, request: web.Request) -> web.Response:
        await self._gate(request)
        text = f'vllm:num_requests_running{{model_name="{MODEL}"}} {self.running}\n'
        text += f'vllm:num_requests_waiting{{model_name="{MODEL}"}} 0\n'
        return web.Response(text=text)

    async def _models(self, request: web.Request) -> web.Response:
        await self._gate(request)
        card = {"id": MODEL, "object": "model", "root": "/nowhere", "max_model_len": 4096}
        return web.json_response({"object": "list", "data": [card]})

    async def _tokenize(self, request: web.Request) -> web.Response:
        await self._gate(request)
        body = await request.json()
        ids = chat_ids(body["messages"]) if "messages" in body else encode(body["prompt"])
        return web.json_response({"tokens": ids, "count": len(ids), "max_model_len": 4096})

    async def _detokenize(self, request: web.Request) -> web.Response:
        await self._gate(request)
        body = await request.json()
        return web.json_response({"prompt": "".join(piece(t) for t in body["tokens"])})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        prompt = body["prompt"]
        ids = list(prompt) if isinstance(prompt, list) else encode(prompt)
        return await self._generate(request, body, ids, chat=False)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        return await self._generate(request, body, chat_ids(body["messages"]), chat=True)

    async def _generate(
        self, request: web.Request, body: dict[str, Any], prompt: list[int], *, chat: bool
    ) -> web.StreamResponse:
        await self._gate(request)
        self.bodies.append(body)
        if body.get("model") != MODEL:
            error: dict[str, str | None] = {
                "message": f"The model `{body.get('model')}` does not exist.",
                "param": "model",
            }
            return web.json_response({"error": error}, status=404)
        if "return_token_ids" in body and not self.token_ids:
            unrecognized = {"message": "Unrecognized field: return_token_ids", "param": None}
            return web.json_response({"error": unrecognized}, status=400)
        max_tokens = int(body.get("max_tokens", 16))
        context = list(prompt)
        out: list[int] = []
        for _ in range(max_tokens):
            out.append(next_token(context))
            context.append(out[-1])
        if not body.get("stream"):
            text = "".join(piece(t) for t in out)
            choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": "length"}
            if body.get("return_token_ids"):
                choice["token_ids"] = out
            usage = {"prompt_tokens": len(prompt), "completion_tokens": len(out)}
            return web.json_response({"choices": [choice], "usage": usage})
        return await self._stream(request, body, prompt, out, chat=chat)

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        prompt: list[int],
        out: list[int],
        *,
        chat: bool,
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        ids = bool(body.get("return_token_ids"))
        self.running += 1
        finished = False
        try:
            for i, t in enumerate(out):
                last = i == len(out) - 1
                choice: dict[str, Any] = {"index": 0, "finish_reason": "length" if last else None}
                if chat:
                    choice["delta"] = {"content": piece(t)}
                else:
                    choice["text"] = piece(t)
                chunk: dict[str, Any] = {"choices": [choice]}
                if ids:
                    choice["token_ids"] = [t]
                    if i == 0:
                        (chunk if chat else choice)["prompt_token_ids"] = prompt
                await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                if self.token_delay_s:
                    await asyncio.sleep(self.token_delay_s)
            usage = {"prompt_tokens": len(prompt), "completion_tokens": len(out)}
            tail = b"data: " + json.dumps({"choices": [], "usage": usage}).encode()
            await resp.write(tail + b"\n\ndata: [DONE]\n\n")
            finished = True
        except ConnectionResetError:  # the client left (or we died): no more to write
            self.client_gone += 1
        except asyncio.CancelledError:
            self.client_gone += 1
            raise
        finally:
            self.running -= 1
        if finished:
            await resp.write_eof()
        return resp


async def _serve(port: int, token_delay_s: float) -> None:
    server = FakeEngineServer(token_delay_s=token_delay_s, port=port)
    await server.start()
    print(f"listening on {server.port}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    """`python -m drill.engine_server PORT [TOKEN_DELAY_S]`: serve until killed."""
    import sys

    import uvloop

    port = int(sys.argv[1])
    delay = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    uvloop.run(_serve(port, delay))


if __name__ == "__main__":
    main()
