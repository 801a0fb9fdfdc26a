"""POST /v1/messages: an Anthropic request through the same service entry point as chat
completions (admission, priorities, routing, preemption, migration), its generation as the
Message object or as Anthropic's SSE events. A request with tools is answered from what its
engine parsed (content and tool calls), as tool_use blocks."""

from __future__ import annotations

import asyncio

from aiohttp import web
from multidict import CIMultiDictProxy
from shardgate.v1 import parsed

from gateway.api.anthropic import encode
from gateway.api.anthropic.blocks_stream import BlockStream
from gateway.api.anthropic.errors import error_event
from gateway.api.anthropic.protocol import decode_messages
from gateway.api.anthropic.tools import tool_uses
from gateway.api.body import read_body
from gateway.api.openai.direct import DirectSink
from gateway.api.openai.serving import (
    KEEPALIVE,
    SSE_HEADERS,
    SSEResponse,
    Tally,
    parse_priority,
    response_headers,
)
from gateway.config.schema import GatewaySettings
from gateway.policy import objectives
from gateway.policy.objectives import TPOT_HEADER, TTFT_HEADER
from gateway.policy.tenants import bearer_key
from gateway.policy.unknown_fields import admit
from gateway.runtime.job import Job
from gateway.runtime.service import Service
from gateway.types import Delta, GatewayError

__all__ = ["AnthropicServing", "api_key"]


def api_key(headers: CIMultiDictProxy[str]) -> str | None:
    """The client's key: `x-api-key` (Anthropic's header), else `Authorization: Bearer`."""
    return headers.get("x-api-key") or bearer_key(headers.get("Authorization"))


class MessageTally(Tally):
    """A chat tally that also keeps the stop sequence the engine says ended the generation."""

    __slots__ = ("stop_sequence",)

    def __init__(self) -> None:
        super().__init__()
        self.stop_sequence: str | None = None

    def add(self, d: Delta) -> None:
        super().add(d)
        if d.finish and d.stop_sequence:
            self.stop_sequence = d.stop_sequence


class AnthropicServing:
    def __init__(self, service: Service, settings: GatewaySettings) -> None:
        self._service = service
        self.settings = settings

    async def messages(self, request: web.Request, rid: str) -> web.StreamResponse:
        s = self.settings
        body = await read_body(request, s.max_body_bytes, s.client_body_timeout_s)
        req = decode_messages(body, rid)
        headers = request.headers
        asked = headers.get("x-priority")
        if asked is not None:
            req.priority = parse_priority(asked)
        req.session_id = headers.get("x-session-id", "")[:128]
        req.objective = objectives.parse(headers.get(TTFT_HEADER), headers.get(TPOT_HEADER))
        if req.unknown_fields is not None:
            tenant = self._service.tenants.resolve(api_key(headers))
            admit(req.unknown_fields, rid, tenant, s.unknown_fields, "anthropic")
        gen = await self._service.submit(req, api_key(headers))
        deadline = asyncio.get_running_loop().time() + s.request_timeout_s
        gen.arm(deadline, s.first_token_timeout_s)
        try:
            batch = await gen.take()
            if req.stream:
                return await self._stream(request, gen, batch)
            while batch and not gen.began:  # keep-alives while queued: nothing to say yet
                batch = await gen.take()
            return await self._unary(gen, batch)
        finally:
            gen.close()

    @staticmethod
    async def _unary(gen: Job, batch: list[Delta]) -> web.Response:
        headers = response_headers(gen)
        tally = MessageTally()
        texts: list[str] = []
        whole: parsed.Parsed | None = None  # the answer its engine parsed (given whole)
        while batch:
            for d in batch:
                tally.add(d)
                texts.append(d.text)
                if d.parsed:
                    whole = parsed.decode(d.parsed)
            batch = await gen.take()
        req = gen.request
        text = "".join(texts)
        uses = None
        if req.generation.tools is not None and whole is not None:
            text = whole.content or ""
            uses = tool_uses(whole)
        body = encode.encode_message(
            req.request_id,
            req.served_model,
            text,
            tally.finish,
            tally.stop_sequence,
            tally.usage(),
            uses,
        )
        return web.Response(body=body, content_type="application/json", headers=headers)

    async def _stream(
        self, request: web.Request, gen: Job, batch: list[Delta]
    ) -> web.StreamResponse:
        """Streams the generation. While the request is queued only `: keep-alive` comments
        leave; message_start leaves with its first output (it carries the input tokens). An
        error after the head left ends the stream as an `error` event."""
        req = gen.request
        resp = SSEResponse(headers={**SSE_HEADERS, **response_headers(gen)})
        await resp.prepare(request)
        buf = bytearray()
        tally = MessageTally()
        enc = encode.EventEncoder(req.request_id, req.served_model)
        blocks = None if req.generation.tools is None else BlockStream()
        try:
            while batch and not gen.began:
                await resp.write(KEEPALIVE * len(batch))
                batch = await gen.take()
            if not batch:  # (the stream ended before any output)
                raise GatewayError("The generation ended without output.")
            enc.start_into(buf, gen.prompt_tokens, text_block=blocks is None)
            await self._relay(request, resp, gen, enc, batch, buf, tally, blocks)
        except GatewayError as e:
            buf += error_event(e)
            await resp.write_eof(bytes(buf))
            return resp
        used = False
        if blocks is not None:
            blocks.close_into(buf)
            used = blocks.tool_used
        output_tokens = tally.usage().completion_tokens
        enc.finish_into(buf, tally.finish, tally.stop_sequence, output_tokens, blocks is None, used)
        await resp.write_eof(bytes(buf))  # one send() with the chunked terminator
        return resp

    async def _relay(
        self,
        request: web.Request,
        resp: web.StreamResponse,
        gen: Job,
        enc: encode.EventEncoder,
        batch: list[Delta],
        buf: bytearray,
        tally: MessageTally,
        blocks: BlockStream | None,
    ) -> None:
        """Write the text deltas as they come: straight from the link reader while the client
        keeps up (the chat edge's direct sink), here (awaiting the socket) when it does not.
        An answer with tools: its parsed pieces as `blocks` has them, all written here."""
        transport = request.transport
        sink = None
        if self.settings.direct_writes and transport is not None and blocks is None:
            chunked = resp.headers.get("Transfer-Encoding", "").lower() == "chunked"
            sink = DirectSink(transport, chunked, enc, tally)
        out = gen.out
        wrote = False
        try:
            while batch:
                if sink is not None:
                    sink.flush()  # frames it buffered go out before anything written here
                for d in batch:
                    if blocks is not None and (d.parsed or d.text):
                        # (an engine that does not parse: its text is the answer's)
                        p = parsed.decode(d.parsed) if d.parsed else parsed.Parsed(content=d.text)
                        blocks.add_into(buf, p)
                    elif d.text:
                        enc.token_chunk_into(buf, d.text)
                    elif not (d.finish or d.prompt_tokens or d.token_ids):
                        buf += KEEPALIVE  # preempted, waiting to resume
                    tally.add(d)
                if buf:
                    await resp.write(bytes(buf))
                    buf.clear()
                    wrote = True
                if sink is not None and wrote:
                    out.sink = sink  # everything taken is written: later tokens may go direct
                batch = await gen.take()
        finally:
            out.sink = None
            if sink is not None:
                sink.flush()
