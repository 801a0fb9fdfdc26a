"""vLLM's `return_token_ids`: the prompt's token ids and each choice's generated ones in the
answers, as vLLM returns them. A slow path for the requests that ask (they take no direct
writes); the others' frames are untouched.

The prompt's ids come from a replica of the model (its Tokenize call: the same ids as the
generation's, the chat template applied), asked before the request is submitted; a prompt of
token ids is its own. The generated ids are those of the request's deltas.

Streamed: chat's first chunk carries `prompt_token_ids` (beside `choices`), a text completion's
first chunk of each choice carries them in the choice; every chunk of a choice carries the
`token_ids` it adds. Not streamed: chat's answer has `prompt_token_ids` beside `choices`, a text
completion's choices each have theirs; every choice has its `token_ids`.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from gateway.api.openai.tokenize import TIMEOUT_S, Tokenizing
from gateway.types import GenerationRequest
from gateway.upstream import tokens

_encode: Final = msgspec.json.Encoder().encode
_json: Final = msgspec.json.Decoder()
# The fields every chunk has, null unless asked for (gateway/api/openai/encode.py).
_IDS: Final = b'"token_ids":null'
_PROMPT_IDS: Final = b'"prompt_token_ids":null'


async def prompt_token_ids(
    tokenizing: Tokenizing, req: GenerationRequest, api_key: str | None
) -> list[int]:
    """The request's prompt as its engine is given it (raises 401/404/503 as /tokenize)."""
    if req.prompt_token_ids is not None:
        return list(req.prompt_token_ids)
    model, lora, address = tokenizing.replica(api_key, req.model)
    generation = msgspec.structs.replace(req.generation, model=model, lora=lora)
    tls = tokenizing.settings.link.tls
    ids, _ = await tokens.tokenize(address, generation, TIMEOUT_S, tls)
    return ids


async def prompts_token_ids(
    tokenizing: Tokenizing, req: GenerationRequest, api_key: str | None
) -> list[list[int]]:
    """The token ids of each prompt of the request (one, or each of a batch's)."""
    return [
        await prompt_token_ids(tokenizing, req.child(p * req.n) if req.batch else req, api_key)
        for p in range(len(req.batch) or 1)
    ]


def _put(buf: bytearray, null: bytes, value: list[int]) -> None:
    """Replace the last `null` field of `buf` (its last chunk's) with `value`."""
    at = buf.rfind(null)
    assert at >= 0, "not a chunk with that field"
    start = at + len(null) - len(b"null")
    buf[start : at + len(null)] = _encode(value)


def add_token_ids(buf: bytearray, ids: list[int], prompt: list[int] | None = None) -> None:
    """Put `token_ids` (and a text completion's `prompt_token_ids`, in its first chunk) in
    the choice of the chunk that `buf` ends with."""
    _put(buf, _IDS, ids)
    if prompt is not None:
        _put(buf, _PROMPT_IDS, prompt)


def role_chunk_with(chunk: bytes, prompt: list[int]) -> bytes:
    """Chat's first chunk with the prompt's ids beside its choices."""
    buf = bytearray(chunk)
    _put(buf, _PROMPT_IDS, prompt)
    return bytes(buf)


def body_with(body: bytes, chat: bool, prompts: list[list[int]], ids: list[list[int]]) -> bytes:
    """A whole answer's body with the token ids: each choice's prompt and generated ids, by
    index (chat's choices share their prompt)."""
    answer: dict[str, Any] = _json.decode(body)
    for choice, prompt, choice_ids in zip(answer["choices"], prompts, ids, strict=True):
        if not chat:
            choice["prompt_token_ids"] = prompt
        choice["token_ids"] = choice_ids
    if chat:
        answer["prompt_token_ids"] = prompts[0]
    return _encode(answer)


class StreamIds:
    """The token ids of one streamed choice's chunks."""

    __slots__ = ("held", "prompt")

    def __init__(self, kind: str, prompt: list[int]) -> None:
        # (a text completion's first chunk carries the prompt's; chat's first chunk has them)
        self.prompt: list[int] | None = prompt if kind == "completion" else None
        self.held: list[int] = []  # ids of tokens whose chunk is still to come

    def add(self, buf: bytearray, ids: list[int]) -> None:
        """The chunk `buf` ends with carries `ids` (after any held)."""
        if self.held:
            ids, self.held = self.held + ids, []
        add_token_ids(buf, ids, self.prompt)
        self.prompt = None
