"""Turns an OpenAI request into a generation and its output into OpenAI responses."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from aiohttp import web

from gateway.api.openai import encode
from gateway.config.schema import GatewaySettings
from gateway.runtime.job import Job
from gateway.runtime.supervisor import Supervisor
from gateway.types import (
    FINISH_REASON,
    Delta,
    Finish,
    GatewayError,
    GenerationRequest,
    Unavailable,
    Usage,
)

Decode = Callable[[bytes, str, int], GenerationRequest]

SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}


class Tally:
    """Usage and finish of a generation, from its deltas."""

    __slots__ = ("cached", "completion", "counted", "finish", "prompt")

    def __init__(self) -> None:
        self.prompt = 0
        self.cached = 0
        self.completion = 0
        self.counted = 0
        self.finish = Finish.NONE

    def add(self, d: Delta) -> None:
        self.counted += len(d.token_ids)
        if d.prompt_tokens:
            self.prompt = d.prompt_tokens
            self.cached = d.cached_tokens
        if d.finish is not Finish.NONE:
            self.finish = d.finish
            self.completion = d.completion_tokens

    def usage(self) -> Usage:
        return Usage(self.prompt, self.completion or self.counted, self.cached)

    @property
    def reason(self) -> str:
        return FINISH_REASON.get(self.finish, "stop")


class OpenAIServing:
    def __init__(self, supervisor: Supervisor, settings: GatewaySettings) -> None:
        self._supervisor = supervisor
        self._settings = settings

    async def generate(
        self, request: web.Request, rid: str, decode: Decode, kind: encode.ChunkKind
    ) -> web.StreamResponse:
        body = await request.read()
        req = decode(body, rid, self._settings.default_max_tokens)
        gen = self._supervisor.submit(req)
        try:
            async with asyncio.timeout(self._settings.request_timeout_s):
                try:
                    async with asyncio.timeout(self._settings.first_token_timeout_s):
                        batch = await gen.take()
                except TimeoutError:
                    raise Unavailable("Timed out waiting for the engine to start.") from None
                headers = {"x-shardgate-replica": gen.replica}
                if req.stream:
                    return await self._stream(request, gen, kind, batch, headers)
                return await self._unary(gen, kind, batch, headers)
        finally:
            gen.close()

    async def _unary(
        self, gen: Job, kind: encode.ChunkKind, batch: list[Delta], headers: dict[str, str]
    ) -> web.Response:
        tally = Tally()
        texts: list[str] = []
        while batch:
            for d in batch:
                tally.add(d)
                texts.append(d.text)
            batch = await gen.take()
        req = gen.request
        encoder = encode.encode_chat_completion if kind == "chat" else encode.encode_completion
        body = encoder(
            req.request_id, req.model, int(time.time()), "".join(texts), tally.reason, tally.usage()
        )
        return web.Response(body=body, content_type="application/json", headers=headers)

    async def _stream(
        self,
        request: web.Request,
        gen: Job,
        kind: encode.ChunkKind,
        batch: list[Delta],
        headers: dict[str, str],
    ) -> web.StreamResponse:
        req = gen.request
        resp = web.StreamResponse(headers={**SSE_HEADERS, **headers})
        await resp.prepare(request)
        enc = encode.ChunkEncoder(req.request_id, req.model, int(time.time()), kind)
        buf = bytearray(enc.role_chunk())
        tally = Tally()
        try:
            while batch:
                for d in batch:
                    tally.add(d)
                    if d.token_ids or d.text:
                        enc.token_chunk_into(buf, d.text)
                if buf:
                    await resp.write(bytes(buf))
                    buf.clear()
                batch = await gen.take()
        except GatewayError as e:
            # The stream already started: the error travels as an SSE event.
            await resp.write(enc.error_event(e.message, e.type, e.status) + encode.DONE)
            return resp
        enc.finish_chunk_into(buf, tally.reason)
        if req.include_usage:
            enc.usage_chunk_into(buf, tally.usage())
        buf += encode.DONE
        await resp.write(bytes(buf))
        await resp.write_eof()
        return resp
