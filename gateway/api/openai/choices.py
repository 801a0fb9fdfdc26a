"""n > 1, and completions' batches of prompts, on the OpenAI edge: the choices of a Fanout
(gateway/api/fanout.py) rendered as one answer or one stream, by choice index (of a batch:
prompt_index * n + i), as vLLM's server renders them. A stream's events are kept like any
stream's (a reader replays them); a client that leaves it is detached from it as from a single
stream (gateway/streams/producer.py): the choices run on for `detach_grace_s`."""

from __future__ import annotations

import asyncio
import time

from gateway.api import fanout
from gateway.api.openai import encode, token_ids
from gateway.api.openai.answer import Answer, delta_of, message_of
from gateway.api.openai.detach import Writer, client_gone
from gateway.api.openai.echo import echo_text
from gateway.api.openai.exchange import Exchange, Outbound, Reply
from gateway.api.openai.logprobs import formatter
from gateway.api.openai.relay import final_step
from gateway.api.openai.sse import KEEPALIVE, SSE_HEADERS, Tally, response_headers
from gateway.api.openai.template import response_role
from gateway.api.openai.usage_chunks import ChoiceUsage
from gateway.runtime.service import Service
from gateway.streams.ask import CHAT, COMPLETIONS
from gateway.streams.hub import Streams
from gateway.streams.producer import produce
from gateway.streams.sse import Tape
from gateway.streams.store import StreamLog
from gateway.types import Delta, GatewayError, GenerationRequest, Logprobs, Usage


class Choices(fanout.Fanout):
    def __init__(
        self,
        service: Service,
        req: GenerationRequest,
        kind: str,
        streams: Streams | None = None,
        prompt_ids: list[list[int]] | None = None,
    ) -> None:
        """`prompt_ids`: each prompt's token ids, for a request that asks for token ids."""
        super().__init__(service, req)
        self._streams = streams
        self.prompt_ids = prompt_ids
        self.kind: encode.ChunkKind = "chat" if kind == "chat" else "completion"
        self.tallies = [Tally() for _ in range(req.choices)]
        self.answers = [
            Answer(req.generation.tools, req.hide_reasoning) for _ in range(req.choices)
        ]

    def usage(self) -> Usage:
        """Each prompt counted once (its n choices share it), every choice's completion."""
        firsts = self.tallies[:: self.req.n]
        completion = sum(t.usage().completion_tokens for t in self.tallies)
        return Usage(sum(t.prompt for t in firsts), completion, sum(t.cached for t in firsts))

    async def unary(self) -> Reply:
        req = self.req
        n = len(self.jobs)
        texts: list[list[str]] = [[echo_text(j.request)] for j in self.jobs]
        lps: list[list[Logprobs]] = [[] for _ in range(n)]
        ids: list[list[int]] = [[] for _ in range(n)]
        while self.left:
            index, batch = await self.next()
            if not batch:
                continue
            for d in batch:
                self.tallies[index].add(d)
                ids[index] += d.token_ids
                texts[index].append(d.text)
                if d.logprobs:
                    lps[index].extend(d.logprobs)
                if d.parsed:
                    self.answers[index].add(d.parsed)
        choices = []
        chat = self.kind == "chat"
        role = response_role(req.generation)
        for i in range(n):
            fmt = formatter(chat, req.sampling)
            logprobs = fmt(lps[i]) if fmt is not None else None
            answer = self.answers[i]
            reason = answer.finish_reason(self.tallies[i].reason, whole=True)
            whole = answer.whole
            message = message_of(whole, role) if chat and whole is not None else None
            if message is not None and texts[i][0]:  # (echo)
                message["content"] = texts[i][0] + (message["content"] or "")
            choices.append(encode.Choice("".join(texts[i]), reason, logprobs, message, role))
        encoder = encode.encode_chat_completion if self.kind == "chat" else encode.encode_completion
        body = encoder(req.request_id, self.served_model, int(time.time()), choices, self.usage())
        if self.prompt_ids is not None:
            prompts = [self.prompt_ids[i // req.n] for i in range(n)]
            body = token_ids.body_with(body, chat, prompts, ids)
        headers = response_headers(self.jobs[0])
        return Reply(body, headers)

    async def stream(self, ex: Exchange) -> Outbound:
        """The choices' chunks as they come. The response starts with its first write: a choice
        refused before that (while queued) is the request's error response. A kept stream goes
        on without its client for `detach_grace_s`, as a single one does."""
        headers = response_headers(self.jobs[0])
        streams = self._streams
        writer = Writer(ex)
        log = None
        if streams is not None:
            route = CHAT if self.kind == "chat" else COMPLETIONS
            log = streams.open(self.jobs[0].tenant, headers, route, self.req.resumable)
        try:  # (an open log is finished whatever happens: a live one is never evicted)
            relay = ChoicesRelay(self, Tape(log) if log is not None else None)
            resp = ex.sse({**SSE_HEADERS, **headers})
            if log is not None:
                log.attach(writer)
            try:
                return await self._stream(resp, relay)
            except (asyncio.CancelledError, ConnectionResetError) as e:
                detached = self._detach(ex, resp, relay, log, writer)
                if detached and isinstance(e, ConnectionResetError):
                    return resp  # (it goes on without its client)
                raise
        finally:
            if log is not None and not self.detached:
                log.detach(writer)
                log.finish()

    def _detach(
        self,
        ex: Exchange,
        resp: Outbound,
        relay: ChoicesRelay,
        log: StreamLog | None,
        writer: Writer,
    ) -> bool:
        """The client left (its head, with the stream id, sent): the choices go on in a
        detached producer when someone may reattach (a grace, or a reader that replaced it)."""
        streams = self._streams
        if log is None or streams is None or not resp.started or relay.ended:
            return False
        if any(job.timed_out for job in self.jobs) or not client_gone(ex):
            return False
        log.detach(writer)
        if streams.grace_s <= 0 and log.reader is None:
            return False  # the engine requests are aborted at once
        self.detach()
        streams.detached.adopt(
            produce(self, relay, log, streams.grace_s), f"detached-{self.req.request_id}"
        )
        return True

    async def _stream(self, resp: Outbound, relay: ChoicesRelay) -> Outbound:
        try:
            while self.left:
                relay.add(await self.next())
                if relay.buf:
                    if not resp.started:
                        await resp.start()
                    await resp.write(relay.take())
        except GatewayError as e:
            if not resp.started:
                raise  # nothing was said yet: an error response
            relay.error(e)
        else:
            relay.end()
        if not resp.started:
            await resp.start()
        await resp.write_eof(relay.take())
        return resp

    def _begin(
        self, buf: bytearray, encs: list[encode.ChunkEncoder], usage: list[ChoiceUsage] | None
    ) -> None:
        """Each choice's first chunks, before any choice's tokens (as vLLM sends them); with
        continuous usage, the prompt's tokens are those of the choice that began."""
        if usage is not None:
            prompt = max(u.prompt for u in usage)
            for u in usage:
                u.prompt = u.prompt or prompt
        for i, enc in enumerate(encs):
            chunk = enc.role_chunk()
            if chunk and self.prompt_ids is not None:  # (chat: one prompt)
                chunk = token_ids.role_chunk_with(chunk, self.prompt_ids[0])
            buf += chunk
            if chunk and usage is not None:
                usage[i].add(buf)
        for i, enc in enumerate(encs):
            echoed = echo_text(self.jobs[i].request)
            if echoed:
                enc.token_chunk_into(buf, echoed)
                if usage is not None:
                    usage[i].add(buf)


class ChoicesRelay:
    """A streamed Fanout's events from its items (a choice's index and batch), encoded into
    one buffer (each event stamped and kept when its stream is kept)."""

    def __init__(self, choices: Choices, tape: Tape | None) -> None:
        self.choices = choices
        self.tape = tape
        req = self.req = choices.req
        created = int(time.time())
        chat = choices.kind == "chat"
        self.encs = encs = [
            encode.ChunkEncoder(
                req.request_id,
                choices.served_model,
                created,
                choices.kind,
                formatter(chat, req.sampling),
                index=i,
                role=response_role(req.generation),
            )
            for i in range(len(choices.jobs))
        ]
        prompt = choices.prompt_ids
        self.ids = None
        if prompt is not None:
            kind = choices.kind
            self.ids = [token_ids.StreamIds(kind, prompt[i // req.n]) for i in range(len(encs))]
        self.usage = [ChoiceUsage() for _ in encs] if req.continuous_usage else None
        self.buf = bytearray()
        # (each choice's final step, until its finish event)
        self.lasts: dict[int, tuple[encode.Last, list[int]]] = {}
        self.began = False
        self.ended = False

    def add(self, item: tuple[int, list[Delta]]) -> None:
        index, batch = item
        choices, buf, ids, usage = self.choices, self.buf, self.ids, self.usage
        tally, answer, enc = choices.tallies[index], choices.answers[index], self.encs[index]
        if not batch:
            self._finish(index)
        for d in batch:
            if (d.token_ids or d.text or d.parsed) and not self.began:
                self.began = True
                if usage is not None:
                    usage[index].see_prompt([d])
                choices._begin(buf, self.encs, usage)
            if usage is not None:
                usage[index].see(d)
            if d.finish:  # its step goes in the choice's finish event, as vLLM sends it
                self.lasts[index] = (final_step(d, answer), d.token_ids)
            elif d.token_ids or d.text or d.parsed:
                if d.parsed:  # an answer its engine parsed: its pieces
                    delta = delta_of(answer.add(d.parsed))
                    if delta is None and d.logprobs:  # its logprobs (as vLLM)
                        delta = {}
                    if delta is not None:
                        enc.delta_chunk_into(buf, delta, d.logprobs)
                        if ids is not None:
                            ids[index].add(buf, d.token_ids)
                        if usage is not None:
                            usage[index].add(buf)
                    elif ids is not None:
                        ids[index].held += d.token_ids  # (nothing to show yet)
                else:
                    enc.token_chunk_into(buf, d.text, d.logprobs)
                    if ids is not None:
                        ids[index].add(buf, d.token_ids)
                    if usage is not None:
                        usage[index].add(buf)
            elif not d.finish and not d.prompt_tokens:
                buf += KEEPALIVE  # queued or preempted: keep the connection alive
            tally.add(d)

    def _finish(self, index: int) -> None:
        """Choice `index`'s finish event, with its final step."""
        buf, ids, usage = self.buf, self.ids, self.usage
        tally, answer = self.choices.tallies[index], self.choices.answers[index]
        last, last_ids = self.lasts.pop(index, (None, []))
        reason = answer.finish_reason(tally.reason, whole=False)
        self.encs[index].finish_chunk_into(buf, reason, last, not self.req.include_usage)
        if ids is not None:
            ids[index].add(buf, last_ids)
        if usage is not None:
            usage[index].add(buf)

    def end(self) -> None:
        """The usage when asked for, and [DONE]."""
        self.ended = True
        if self.req.include_usage:
            self.encs[0].usage_chunk_into(self.buf, self.choices.usage())
        self.buf += encode.DONE

    def error(self, e: GatewayError) -> None:
        """The stream already started: the error travels as an SSE event (after the finish
        events of the choices that finished, their last steps with them)."""
        for index in sorted(self.lasts):
            self._finish(index)
        self.buf += encode.ChunkEncoder.error_event(e.message, e.type, e.status)
        self.end()

    def take(self) -> bytes:
        """What was encoded since the last take, ready to send."""
        buf = self.buf
        out = self.tape.stamp(buf) if self.tape is not None else bytes(buf)
        buf.clear()
        return out
