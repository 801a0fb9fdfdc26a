"""One streamed chunk of /v1/completions or /v1/chat/completions, as the backend reads it.

Decoded with msgspec into the few fields it needs (all others are ignored): the text, vLLM's
token ids (`return_token_ids`: the prompt's in the first chunk, each chunk's own), the finish
reason and vLLM's `stop_reason` (the stop string that ended it, when one did; a stop token's id
otherwise), the usage of the last chunk, an error sent inside the stream, and the logprobs of
/v1/completions asked with `return_tokens_as_token_ids` (logprobs.py).
"""

from __future__ import annotations

import msgspec

from engine_sidecar.backend import Finish
from engine_sidecar.backends.openai.logprobs import Position, positions

FINISH = {
    "stop": Finish.STOP,
    "length": Finish.LENGTH,
    "tool_calls": Finish.STOP,
    "function_call": Finish.STOP,
    "abort": Finish.ABORT,
    "error": Finish.ERROR,
}


class _Delta(msgspec.Struct, gc=False):
    content: str | None = None


class _Logprobs(msgspec.Struct, gc=False):  # completions'
    tokens: list[str] = []
    token_logprobs: list[float | None] = []
    top_logprobs: list[dict[str, float] | None] = []


class _Choice(msgspec.Struct, gc=False):
    index: int = 0
    text: str | None = None  # completions
    logprobs: _Logprobs | None = None  # completions (chat's are not read)
    delta: _Delta | None = None  # chat
    token_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None  # completions: the first chunk
    finish_reason: str | None = None
    stop_reason: str | int | None = None  # vLLM's


class _Details(msgspec.Struct, gc=False):
    cached_tokens: int | None = None


class _Usage(msgspec.Struct, gc=False):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_details: _Details | None = None


class _Error(msgspec.Struct, gc=False):
    message: str = ""
    param: str | None = None
    code: int | str | None = None


class _Chunk(msgspec.Struct, gc=False):
    choices: list[_Choice] = []
    usage: _Usage | None = None
    prompt_token_ids: list[int] | None = None  # chat: the first chunk
    error: _Error | None = None


class Chunk(msgspec.Struct, gc=False):
    """What one chunk brings. `token_ids` is None where the server sends no ids."""

    text: str = ""
    token_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None
    finish_reason: str | None = None
    stop_sequence: str = ""  # the stop string that ended it (vLLM's stop_reason, a string)
    usage: tuple[int, int, int] | None = None  # prompt, completion, cached tokens
    error: str | None = None
    error_param: str = ""
    logprobs: list[Position] | None = None  # one per token id, where asked for


_DECODE = msgspec.json.Decoder(_Chunk)


def read_chunk(data: bytes) -> Chunk:
    """Raises msgspec.DecodeError / ValidationError on a chunk that is not one (logprobs that
    are not token ids, too)."""
    c = _DECODE.decode(data)
    if c.usage is None and c.error is None and c.prompt_token_ids is None and len(c.choices) == 1:
        ch = c.choices[0]  # (most chunks: one choice's tokens, and nothing else)
        if ch.logprobs is None and ch.prompt_token_ids is None and ch.stop_reason is None:
            return Chunk(_text(ch), ch.token_ids, None, ch.finish_reason)
    out = Chunk(prompt_token_ids=c.prompt_token_ids)
    if c.error is not None:
        out.error = c.error.message or "the engine server failed the request"
        out.error_param = c.error.param or ""
    if c.usage is not None:
        u = c.usage
        cached = u.prompt_tokens_details.cached_tokens if u.prompt_tokens_details else None
        out.usage = (u.prompt_tokens, u.completion_tokens, cached or 0)
    for choice in c.choices:  # (one: n=1)
        out.text = _text(choice)
        out.token_ids = choice.token_ids
        if choice.prompt_token_ids is not None:
            out.prompt_token_ids = choice.prompt_token_ids
        out.finish_reason = choice.finish_reason
        lp = choice.logprobs
        if lp is not None and choice.text is not None:
            try:
                out.logprobs = positions(lp.tokens, lp.token_logprobs, lp.top_logprobs)
            except ValueError as e:
                raise msgspec.ValidationError(f"logprobs: {e}") from None
            if out.token_ids is not None and len(out.token_ids) != len(out.logprobs):
                raise msgspec.ValidationError("logprobs: not one per token id")
        if isinstance(choice.stop_reason, str):
            out.stop_sequence = choice.stop_reason
    return out


def _text(choice: _Choice) -> str:
    """Completions' text or chat's delta content."""
    if choice.text is not None:
        return choice.text
    return (choice.delta.content if choice.delta is not None else None) or ""


def finish_of(reason: str | None) -> Finish:
    return FINISH.get(reason, Finish.STOP) if reason else Finish.STOP
