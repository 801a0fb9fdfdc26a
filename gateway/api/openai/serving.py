"""Turns an OpenAI request into a generation and its output into OpenAI responses."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from gateway.api.openai import echo, encode, token_ids
from gateway.api.openai.answer import Answer, message_of
from gateway.api.openai.choices import Choices
from gateway.api.openai.detach import Unbegun, Writer, client_gone
from gateway.api.openai.direct import DirectSink
from gateway.api.openai.echo import echo_text
from gateway.api.openai.exchange import Answered, Exchange, Outbound, Reply
from gateway.api.openai.logprobs import formatter
from gateway.api.openai.relay import Relay
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
from gateway.policy import objectives
from gateway.policy.objectives import TPOT_HEADER, TTFT_HEADER
from gateway.policy.tenants import bearer_key
from gateway.policy.unknown_fields import admit
from gateway.runtime.job import Job
from gateway.runtime.service import Service
from gateway.streams.ask import CHAT, COMPLETIONS, RESUMABLE_HEADER, parse_asked
from gateway.streams.hub import Streams
from gateway.streams.producer import run_detached
from gateway.streams.sse import Tape
from gateway.streams.store import StreamLog
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
    def __init__(
        self,
        service: Service,
        settings: GatewaySettings,
        tokenizing: Tokenizing,
        streams: Streams | None = None,
    ) -> None:
        self._service = service
        self.settings = settings
        self._tokenizing = tokenizing
        self.streams = streams

    async def generate(
        self, ex: Exchange, rid: str, decode: Decode, kind: encode.ChunkKind
    ) -> Answered:
        """The answer to one request, whichever HTTP server carries it (exchange.py)."""
        s = self.settings
        key = bearer_key(ex.header("authorization"))
        self._service.tenants.resolve(key)  # (a 401 before the body is read, on either path)
        # (no name for the body: a stream's frame would hold it to its end)
        req = decode(
            await ex.body(s.max_body_bytes, s.client_body_timeout_s), rid, s.default_max_tokens
        )
        asked = ex.header("x-priority")
        if asked is not None:
            req.priority = parse_priority(asked)
        req.session_id = (ex.header("x-session-id") or "")[:128]
        req.objective = objectives.parse(ex.header(TTFT_HEADER), ex.header(TPOT_HEADER))
        resumable = parse_asked(ex.header(RESUMABLE_HEADER))
        if resumable is not None:
            req.resumable = resumable  # (the header over stream_options.resumable)
        if req.unknown_fields is not None:  # (refused, or named in a warning: before any work)
            admit(req.unknown_fields, rid, self._service.tenants.resolve(key), s.unknown_fields)
        deadline = asyncio.get_running_loop().time() + self.settings.request_timeout_s
        prompts = None  # each prompt's token ids, when the answer carries them
        if req.return_token_ids:
            prompts = await prompts_token_ids(self._tokenizing, req, key)
        await echo.fetch_prompt_text(self._tokenizing, req, key)
        if req.choices > 1:
            choices = Choices(self._service, req, kind, self.streams, prompts)
            try:
                await choices.submit(key)
                choices.arm(deadline, self.settings.first_token_timeout_s)
                if req.stream:
                    return await choices.stream(ex)
                return await choices.unary()
            finally:
                await choices.close()
        prompt_ids = prompts[0] if prompts is not None else None
        gen = await self._service.submit(req, key)
        gen.arm(deadline, self.settings.first_token_timeout_s)
        if req.stream:
            return await self._stream(ex, gen, kind, prompt_ids)  # (it closes the job)
        try:
            batch = await gen.take()
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
    ) -> Reply:
        tally = Tally()
        req = gen.request
        answer = Answer(req.generation.tools, req.hide_reasoning)
        echoed = echo_text(req)
        texts: list[str] = [echoed]
        fmt = formatter(kind == "chat", req.sampling)
        lps: list[Logprobs] = []
        prompt_lps: list[Logprobs] = []
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
                if d.prompt_logprobs:
                    prompt_lps = d.prompt_logprobs
            batch = await gen.take()
        text, reason = "".join(texts), answer.finish_reason(tally.reason, whole=True)
        role = response_role(req.generation)
        message = message_of(answer.whole, role) if answer.whole is not None else None
        if message is not None and echoed:
            message["content"] = echoed + (message["content"] or "")
        if echoed and kind == "completion":
            lps = prompt_lps + lps  # (asked for with logprobs: vLLM)
        logprobs = fmt(lps) if fmt is not None else None
        encoder = encode.encode_chat_completion if kind == "chat" else encode.encode_completion
        choice = encode.Choice(text, reason, logprobs, message if kind == "chat" else None, role)
        body = encoder(req.request_id, req.served_model, int(time.time()), [choice], tally.usage())
        if prompt_ids is not None:
            body = token_ids.body_with(body, kind == "chat", [prompt_ids], [ids])
        if req.sampling.prompt_logprobs is not None:
            body = echo.body_with(body, kind == "chat", prompt_lps)
        return Reply(body, headers)

    async def _stream(
        self,
        ex: Exchange,
        gen: Job,
        kind: encode.ChunkKind,
        prompt_ids: list[int] | None = None,
    ) -> Outbound:
        """Streams the generation (the job's timer ends it with an error event if it runs past
        its deadline). A request still queued when its keep-alive is due gets its headers and
        `: keep-alive` comments only; the role chunk leaves with its first token. A stream the
        store keeps goes on without its client for `detach_grace_s` (run_detached)."""
        log: StreamLog | None = None
        writer = Writer(ex)
        handed = started = False
        try:
            # The engine request leaves on the link when this task yields: yield first, and
            # set the stream up while the engine works on it (not after its first token).
            await asyncio.sleep(0)
            req = gen.request
            kept: dict[str, str] = {}  # the stream id's header, once kept
            if self.streams is not None:
                route = CHAT if kind == "chat" else COMPLETIONS
                log = self.streams.open(gen.tenant, kept, route, req.resumable)
            fmt = formatter(kind == "chat", req.sampling)
            role = response_role(req.generation)
            created = int(time.time())
            enc = encode.ChunkEncoder(
                req.request_id, req.served_model, created, kind, fmt, role=role
            )
            tape = Tape(log) if log is not None else None
            ids = token_ids.StreamIds(kind, prompt_ids) if prompt_ids is not None else None
            usage = ChoiceUsage() if req.continuous_usage else None
            answer = Answer(req.generation.tools, req.hide_reasoning)
            relay = Relay(req, enc, Tally(), answer, tape, ids, usage, prompt_ids)
            batch = await gen.take()
            headers = response_headers(gen)  # (the replica's, once placed)
            headers.update(kept)
            if log is not None:
                log.attach(writer)
            started = True
            resp = ex.sse({**SSE_HEADERS, **headers})
            named = "x-shardgate-replica" in headers
            del headers, kept  # (this frame lasts as long as the stream: it keeps none of it)
            await resp.start()
            try:
                written = self._write(ex, resp, gen, relay, batch, named)
                del batch  # (the first batch: the write's, while it needs it)
                return await written
            except (asyncio.CancelledError, ConnectionResetError) as e:
                handed = self._detach(ex, gen, relay, log, writer)
                if handed and isinstance(e, ConnectionResetError):
                    return resp
                raise
        finally:
            if not handed:
                if log is not None and not started:
                    log.discard()  # it failed before its head: nobody knows its id
                elif log is not None:
                    log.detach(writer)  # (its connection may serve another request next)
                    log.finish()
                gen.close()

    def _detach(
        self, ex: Exchange, gen: Job, relay: Relay, log: StreamLog | None, writer: Writer
    ) -> bool:
        """The client left (mid-stream, or still queued: its head, with the stream id, sent):
        hand the rest to a detached producer when the stream is kept and someone may reattach
        (a grace, or a reader that replaced this client)."""
        if log is None or self.streams is None or relay.ended or gen.timed_out:
            return False
        if not client_gone(ex):
            return False  # cancelled for another reason (the gateway stops)
        log.detach(writer)
        grace = self.settings.detach_grace_s
        if grace <= 0 and log.reader is None:
            return False  # today's behaviour: the engine request is aborted at once
        gen.out.sink = None
        enc = relay if relay.begun else Unbegun(relay, gen)
        self.streams.detached.adopt(
            run_detached(gen, enc, log, grace), f"detached-{gen.request.request_id}"
        )
        return True

    async def _write(
        self,
        ex: Exchange,
        resp: Outbound,
        gen: Job,
        relay: Relay,
        batch: list[Delta],
        named: bool,
    ) -> Outbound:
        """`named`: the response's head names the replica (x-shardgate-replica)."""
        enc, buf = relay.enc, relay.buf
        if batch and not gen.began:
            try:
                batch = await self._wait_queued(resp, gen, batch)
            except GatewayError as e:  # refused while queued, after the head left
                relay.error(e)
                await resp.write_eof(relay.take())
                return resp
            if gen.first_replica and not named:
                # The head left before a replica took it: named here instead.
                buf += b": x-shardgate-replica: %s\n\n" % gen.first_replica.encode()
        relay.begin(batch)
        transport = ex.transport
        sink = None
        # (chunks with more than the tokens take no direct writes)
        slow = relay.ids is not None or relay.usage is not None
        if self.settings.direct_writes and transport is not None and not slow:
            plain = enc.plain_tokens() if relay.tape is not None else None
            sink = DirectSink(transport, resp.chunked, enc, relay.tally, relay.tape, plain)
            del plain  # (this frame lasts as long as the stream)
        try:
            try:
                relayed = self._relay(resp, gen, relay, batch, sink)
                del batch  # (the first batch: the relay's, while it needs it)
                await relayed
            finally:
                gen.out.sink = None
                if sink is not None:
                    sink.flush()
        except GatewayError as e:
            relay.error(e)
            await resp.write_eof(relay.take())
            return resp
        relay.end()
        await resp.write_eof(relay.take())  # one send() with the chunked terminator
        return resp

    @staticmethod
    async def _wait_queued(resp: Outbound, gen: Job, batch: list[Delta]) -> list[Delta]:
        """Keep a queued client's connection alive until an engine produces its first output
        (or the request fails: raised as the error response, nothing else was said)."""
        while batch and not gen.began:
            await resp.write(KEEPALIVE * len(batch))
            batch = await gen.take()
        return batch

    @staticmethod
    async def _relay(
        resp: Outbound,
        gen: Job,
        relay: Relay,
        batch: list[Delta],
        sink: DirectSink | None,
    ) -> None:
        """Write the generation's chunks as they come: straight from the link reader through
        the sink while the client keeps up, here (awaiting the socket) when it does not."""
        out = gen.out
        wrote = False  # the response's head leaves with its first write (SSEResponse)
        while batch:
            if sink is not None:
                sink.flush()  # frames it buffered go out before anything written here
            relay.add(batch)
            if relay.buf and not out.done:  # (the last batch leaves with the stream's end)
                await resp.write(relay.take())
                wrote = True
            if sink is not None and wrote:
                out.sink = sink  # everything taken is written: later tokens may go direct
            del batch  # (written: not held while it waits for the next, the stream's length)
            batch = await gen.take()
