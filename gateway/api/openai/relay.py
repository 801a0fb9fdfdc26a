"""A streamed chat or completion's events, from its deltas: encoded into one buffer that the
writer sends (each event stamped and kept when its stream is kept)."""

from __future__ import annotations

from gateway.api.openai import encode
from gateway.api.openai.answer import Answer, delta_of
from gateway.api.openai.sse import KEEPALIVE, Tally
from gateway.streams.sse import Tape
from gateway.types import Delta, GatewayError, GenerationRequest


class Relay:
    __slots__ = ("answer", "begun", "buf", "enc", "ended", "req", "tally", "tape")

    def __init__(
        self,
        req: GenerationRequest,
        enc: encode.ChunkEncoder,
        tally: Tally,
        answer: Answer,
        tape: Tape | None,
    ) -> None:
        self.req = req
        self.enc = enc
        self.tally = tally
        self.answer = answer
        self.tape = tape
        self.buf = bytearray()
        self.begun = False  # its first chunks are encoded: what follows is its deltas
        self.ended = False  # its last events are encoded

    def begin(self) -> None:
        """The role chunk, and (completions' echo) the prompt, as vLLM streams them."""
        self.buf += self.enc.role_chunk()
        if self.req.echo:
            self.enc.token_chunk_into(self.buf, self.req.prompt or "")
        self.begun = True

    def add(self, batch: list[Delta]) -> None:
        enc, buf, answer, tally = self.enc, self.buf, self.answer, self.tally
        for d in batch:
            if d.parsed:  # an answer its engine parsed: its pieces, not the raw text
                delta = delta_of(answer.add(d.parsed))
                if delta is None and d.logprobs:  # nothing to say, but its logprobs (as vLLM)
                    delta = {}
                if delta is not None:
                    enc.delta_chunk_into(buf, delta, d.logprobs)
            elif d.token_ids or d.text:
                enc.token_chunk_into(buf, d.text, d.logprobs)
            elif not d.finish and not d.prompt_tokens:
                buf += KEEPALIVE  # waiting in a queue: keep the connection alive
            tally.add(d)

    def end(self) -> None:
        """The finish chunk, the usage when asked for, and [DONE]."""
        self.ended = True
        buf = self.buf
        self.enc.finish_chunk_into(buf, self.answer.finish_reason(self.tally.reason, whole=False))
        if self.req.include_usage:
            self.enc.usage_chunk_into(buf, self.tally.usage())
        buf += encode.DONE

    def error(self, e: GatewayError) -> None:
        """The stream already started: the error travels as an SSE event, with the usage so
        far when the client asked for usage."""
        self.ended = True
        buf = self.buf
        buf += self.enc.error_event(e.message, e.type, e.status)
        if self.req.include_usage:
            self.enc.usage_chunk_into(buf, self.tally.usage())
        buf += encode.DONE

    def take(self) -> bytes:
        """What was encoded since the last take, ready to send."""
        buf = self.buf
        out = self.tape.stamp(buf) if self.tape is not None else bytes(buf)
        buf.clear()
        return out
