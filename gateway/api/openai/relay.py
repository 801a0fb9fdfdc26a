"""A streamed chat or completion's events, from its deltas: encoded into one buffer that the
writer sends (each event stamped and kept when its stream is kept)."""

from __future__ import annotations

from gateway.api.openai import encode
from gateway.api.openai.answer import Answer, delta_of
from gateway.api.openai.echo import echo_text
from gateway.api.openai.sse import KEEPALIVE, Tally
from gateway.api.openai.token_ids import StreamIds, role_chunk_with
from gateway.api.openai.usage_chunks import ChoiceUsage
from gateway.streams.sse import Tape
from gateway.types import Delta, GatewayError, GenerationRequest


def final_step(d: Delta, answer: Answer) -> encode.Last:
    """What a choice's finishing delta adds to its finish event (its parsed piece, or its
    text; and its logprobs and stop string)."""
    stop = d.stop_sequence or None
    if d.parsed:
        delta = delta_of(answer.add(d.parsed))
        return encode.Last(delta=delta, parsed=True, logprobs=d.logprobs, stop_reason=stop)
    return encode.Last(text=d.text, logprobs=d.logprobs, stop_reason=stop)


class Relay:
    __slots__ = (
        "answer",
        "begun",
        "buf",
        "enc",
        "ended",
        "ids",
        "last",
        "last_ids",
        "prompt_ids",
        "req",
        "tally",
        "tape",
        "usage",
    )

    def __init__(
        self,
        req: GenerationRequest,
        enc: encode.ChunkEncoder,
        tally: Tally,
        answer: Answer,
        tape: Tape | None,
        ids: StreamIds | None = None,
        usage: ChoiceUsage | None = None,
        prompt_ids: list[int] | None = None,
    ) -> None:
        """`ids`: vLLM's return_token_ids; `usage`: continuous_usage_stats (each chunk then
        gets more than its tokens: gateway/api/openai/token_ids.py, usage_chunks.py)."""
        self.req = req
        self.enc = enc
        self.tally = tally
        self.answer = answer
        self.tape = tape
        self.ids = ids
        self.prompt_ids = prompt_ids  # (chat's first chunk carries them)
        self.usage = usage
        self.buf = bytearray()
        self.last: encode.Last | None = None  # what the final step added (its finish event's)
        self.last_ids: list[int] = []
        self.begun = False  # its first chunks are encoded: what follows is its deltas
        self.ended = False  # its last events are encoded

    def begin(self, batch: list[Delta]) -> None:
        """The role chunk, and (completions' echo) the prompt, as vLLM streams them; `batch`:
        the first deltas (the prompt's size, for continuous usage)."""
        buf, usage = self.buf, self.usage
        role_chunk = self.enc.role_chunk()
        if self.prompt_ids is not None and role_chunk:
            role_chunk = role_chunk_with(role_chunk, self.prompt_ids)
        buf += role_chunk
        if usage is not None:
            usage.see_prompt(batch)
            if role_chunk:
                usage.add(buf)
        echoed = echo_text(self.req)
        if echoed:
            prompt_lps = None
            if self.req.sampling.logprobs is not None and self.req.generation.messages is None:
                prompt_lps = next((d.prompt_logprobs for d in batch if d.prompt_logprobs), [])
            self.enc.token_chunk_into(buf, echoed, prompt_lps)
            if usage is not None:
                usage.add(buf)
        self.begun = True

    def add(self, batch: list[Delta]) -> None:
        enc, buf, answer, tally = self.enc, self.buf, self.answer, self.tally
        ids, usage = self.ids, self.usage
        for d in batch:
            if usage is not None:
                usage.see(d)
            if d.finish:  # its step goes in the finish event, as vLLM sends it
                self.last, self.last_ids = final_step(d, answer), d.token_ids
            elif d.parsed:  # an answer its engine parsed: its pieces, not the raw text
                delta = delta_of(answer.add(d.parsed))
                if delta is None and d.logprobs:  # nothing to say, but its logprobs (as vLLM)
                    delta = {}
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

    def end(self) -> None:
        """The finish chunk, the usage when asked for, and [DONE]."""
        self.ended = True
        buf = self.buf
        reason = self.answer.finish_reason(self.tally.reason, whole=False)
        self.enc.finish_chunk_into(buf, reason, self.last, not self.req.include_usage)
        if self.ids is not None:
            self.ids.add(buf, self.last_ids)
        if self.usage is not None:
            self.usage.add(buf)
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
