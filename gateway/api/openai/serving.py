"""Turns an OpenAI request into a generation and its output into OpenAI responses."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from aiohttp import web

from gateway.api.body import read_body
from gateway.api.openai import encode, token_ids
from gateway.api.openai.answer import Answer, delta_of, message_of
from gateway.api.openai.choices import Choices
from gateway.api.openai.direct import DirectSink
from gateway.api.openai.logprobs import formatter
from gateway.api.openai.sse import (
    KEEPALIVE,
    SSE_HEADERS,
    SSEResponse,
    Tally,
    parse_priority,
    response_headers,
)
from gateway.api.openai.template import response_role
from gateway.api.openai.token_ids import prompts_token_ids
from gateway.api.openai.tokenize import Tokenizing
from gateway.api.openai.usage_chunks import ChoiceUsage
from gateway.config.schema import GatewaySettings
from gateway.policy.tenants import bearer_key
from gateway.runtime.job import Job
from gateway.runtime.service import Service
from gateway.types import (
    Delta,
    GatewayError,
    GenerationRequest,
    Logprobs,
)

Decode = Callable[[bytes, str, int], GenerationRequest]

__all__ = [
    "KEEPALIVE",
    "SSE_HEADERS",
    "OpenAIServing",
    "SSEResponse",
    "Tally",
    "parse_priority",
    "response_headers",
]


class OpenAIServing:
    def __init__(self, service: Service, settings: GatewaySettings, tokenizing: Tokenizing) -> None:
        self._service = service
        self.settings = settings
        self._tokenizing = tokenizing

    async def generate(
        self, request: web.Request, rid: str, decode: Decode, kind: encode.ChunkKind
    ) -> web.StreamResponse:
        s = self.settings
        body = await read_body(request, s.max_body_bytes, s.client_body_timeout_s)
        req = decode(body, rid, self.settings.default_max_tokens)
        headers = request.headers
        asked = headers.get("x-priority")
        if asked is not None:
            req.priority = parse_priority(asked)
        req.session_id = headers.get("x-session-id", "")[:128]
        key = bearer_key(headers.get("Authorization"))
        deadline = asyncio.get_running_loop().time() + self.settings.request_timeout_s
        prompts = None  # each prompt's token ids, when the answer carries them
        if req.return_token_ids:
            prompts = await prompts_token_ids(self._tokenizing, req, key)
        if req.choices > 1:
            choices = Choices(self._service, req, kind, prompts)
            try:
                await choices.submit(key)
                choices.arm(deadline, self.settings.first_token_timeout_s)
                if req.stream:
                    return await choices.stream(request)
                return await choices.unary()
            finally:
                await choices.close()
        prompt_ids = prompts[0] if prompts is not None else None
        gen = await self._service.submit(req, key)
        gen.arm(deadline, self.settings.first_token_timeout_s)
        try:
            batch = await gen.take()
            if req.stream:
                return await self._stream(request, gen, kind, batch, prompt_ids)
            while batch and not gen.began:  # keep-alives while queued: nothing to say yet
                batch = await gen.take()
            return await self._unary(gen, kind, batch, response_headers(gen), prompt_ids)
        finally:
            gen.close()

    async def _unary(
        self,
        gen: Job,
        kind: encode.ChunkKind,
        batch: list[Delta],
        headers: dict[str, str],
        prompt_ids: list[int] | None = None,
    ) -> web.Response:
        tally = Tally()
        req = gen.request
        answer = Answer(req.generation.tools)
        texts: list[str] = [req.prompt or ""] if req.echo else []
        fmt = formatter(kind == "chat", req.sampling.logprobs)
        lps: list[Logprobs] = []
        ids: list[int] = []
        while batch:
            for d in batch:
                tally.add(d)
                ids += d.token_ids
                texts.append(d.text)
                if d.logprobs:
                    lps.extend(d.logprobs)
                if d.parsed:
                    answer.add(d.parsed)
            batch = await gen.take()
        text, reason = "".join(texts), answer.finish_reason(tally.reason, whole=True)
        role = response_role(req.generation)
        message = message_of(answer.whole, role) if answer.whole is not None else None
        logprobs = fmt(lps) if fmt is not None else None
        encoder = encode.encode_chat_completion if kind == "chat" else encode.encode_completion
        choice = encode.Choice(text, reason, logprobs, message if kind == "chat" else None, role)
        body = encoder(req.request_id, req.served_model, int(time.time()), [choice], tally.usage())
        if prompt_ids is not None:
            body = token_ids.body_with(body, kind == "chat", [prompt_ids], [ids])
        return web.Response(body=body, content_type="application/json", headers=headers)

    async def _stream(
        self,
        request: web.Request,
        gen: Job,
        kind: encode.ChunkKind,
        batch: list[Delta],
        prompt_ids: list[int] | None = None,
    ) -> web.StreamResponse:
        """Streams the generation (the job's timer ends it with an error event if it runs past
        its deadline). A request still queued when its keep-alive is due gets its headers and
        `: keep-alive` comments only; the role chunk leaves with its first token."""
        req = gen.request
        headers = response_headers(gen)
        resp = SSEResponse(headers={**SSE_HEADERS, **headers})
        await resp.prepare(request)
        buf = bytearray()
        tally = Tally()
        answer = Answer(req.generation.tools)
        fmt = formatter(kind == "chat", req.sampling.logprobs)
        enc = encode.ChunkEncoder(
            req.request_id,
            req.served_model,
            int(time.time()),
            kind,
            fmt,
            role=response_role(req.generation),
        )
        if batch and not gen.began:
            try:
                batch = await self._wait_queued(resp, gen, batch)
            except GatewayError as e:  # refused while queued, after the head left
                return await self._end_with(resp, req, enc, buf, tally, e)
            if gen.first_replica and "x-shardgate-replica" not in headers:
                # The head left before a replica took it: named here instead.
                buf += b": x-shardgate-replica: %s\n\n" % gen.first_replica.encode()
        role_chunk = enc.role_chunk()
        if prompt_ids is not None and role_chunk:
            role_chunk = token_ids.role_chunk_with(role_chunk, prompt_ids)
        buf += role_chunk
        usage = ChoiceUsage() if req.continuous_usage else None
        if usage is not None:
            usage.see_prompt(batch)
            if role_chunk:
                usage.add(buf)
        if req.echo:  # completions: the prompt first, as vLLM streams it
            enc.token_chunk_into(buf, req.prompt or "")
            if usage is not None:
                usage.add(buf)
        transport = request.transport
        sink = None
        ids = token_ids.StreamIds(kind, prompt_ids) if prompt_ids is not None else None
        slow = ids is not None or usage is not None  # (chunks with more than the tokens)
        if self.settings.direct_writes and transport is not None and not slow:
            chunked = resp.headers.get("Transfer-Encoding", "").lower() == "chunked"
            sink = DirectSink(transport, chunked, enc, tally)
        try:
            try:
                await self._relay(resp, gen, enc, batch, buf, tally, sink, answer, ids, usage)
            finally:
                gen.out.sink = None
                if sink is not None:
                    sink.flush()
        except GatewayError as e:
            return await self._end_with(resp, req, enc, buf, tally, e)
        enc.finish_chunk_into(buf, answer.finish_reason(tally.reason, whole=False))
        if ids is not None:
            ids.add(buf, [])
        if usage is not None:
            usage.add(buf)
        if req.include_usage:
            enc.usage_chunk_into(buf, tally.usage())
        buf += encode.DONE
        await resp.write_eof(bytes(buf))  # one send() with the chunked terminator
        return resp

    @staticmethod
    async def _end_with(
        resp: web.StreamResponse,
        req: GenerationRequest,
        enc: encode.ChunkEncoder,
        buf: bytearray,
        tally: Tally,
        e: GatewayError,
    ) -> web.StreamResponse:
        """The stream already started: the error travels as an SSE event, with the usage so
        far when the client asked for usage."""
        buf += enc.error_event(e.message, e.type, e.status)
        if req.include_usage:
            enc.usage_chunk_into(buf, tally.usage())
        buf += encode.DONE
        await resp.write_eof(bytes(buf))
        return resp

    @staticmethod
    async def _wait_queued(resp: web.StreamResponse, gen: Job, batch: list[Delta]) -> list[Delta]:
        """Keep a queued client's connection alive until an engine produces its first output
        (or the request fails: raised as the error response, nothing else was said)."""
        while batch and not gen.began:
            await resp.write(KEEPALIVE * len(batch))
            batch = await gen.take()
        return batch

    @staticmethod
    async def _relay(
        resp: web.StreamResponse,
        gen: Job,
        enc: encode.ChunkEncoder,
        batch: list[Delta],
        buf: bytearray,
        tally: Tally,
        sink: DirectSink | None,
        answer: Answer,
        ids: token_ids.StreamIds | None = None,
        usage: ChoiceUsage | None = None,
    ) -> None:
        """Write the generation's chunks as they come: straight from the link reader through
        the sink while the client keeps up, here (awaiting the socket) when it does not."""
        out = gen.out
        wrote = False  # the response's head leaves with its first write (SSEResponse)
        while batch:
            if sink is not None:
                sink.flush()  # frames it buffered go out before anything written here
            for d in batch:
                if usage is not None:
                    usage.see(d)
                if d.parsed:  # an answer its engine parsed: its pieces, not the raw text
                    delta = delta_of(answer.add(d.parsed))
                    if delta is not None:
                        enc.delta_chunk_into(buf, delta, d.logprobs)
                        if ids is not None:
                            ids.add(buf, d.token_ids)
                        if usage is not None:
                            usage.add(buf)
                    elif ids is not None and d.token_ids:
                        ids.held += d.token_ids  # (tokens with nothing to show yet)
                elif d.token_ids or d.text:
                    enc.token_chunk_into(buf, d.text, d.logprobs)
                    if ids is not None:
                        ids.add(buf, d.token_ids)
                    if usage is not None:
                        usage.add(buf)
                elif not d.finish and not d.prompt_tokens:
                    buf += KEEPALIVE  # waiting in a queue: keep the connection alive
                tally.add(d)
            if buf:
                await resp.write(bytes(buf))
                buf.clear()
                wrote = True
            if sink is not None and wrote:
                out.sink = sink  # everything taken is written: later tokens may go direct
            batch = await gen.take()
