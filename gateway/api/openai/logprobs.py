"""The engine's per-token logprobs in the OpenAI API's shapes, as vLLM's server renders them.

Each token's `Logprobs` lists the sampled token first, then the top alternatives by rank (a token
among both once, first). Chat takes the first `top_logprobs` of those entries as each token's
`top_logprobs`; completions map the first `logprobs + 1` of them, by token text (an echoed
prompt's tokens first, the first of them without logprobs). Logprobs of -inf are sent as
-9999.0, as OpenAI does.
"""

from __future__ import annotations

from typing import Any

from shardgate.v1.params import Logprobs, Sampling

_FLOOR = -9999.0


def _bytes(token: str) -> list[int]:
    return list(token.encode("utf-8", errors="replace"))


class ChatLogprobs:
    """`choices[].logprobs` of a chat completion (or of one chunk of its stream)."""

    __slots__ = ("_top",)

    def __init__(self, top: int) -> None:
        self._top = top  # -1: every entry the engine gave

    def __call__(self, lps: list[Logprobs]) -> dict[str, Any]:
        content = []
        top = self._top
        for lp in lps:
            n = len(lp.ids) if top == -1 else min(top, len(lp.ids))
            token = lp.tokens[0]
            content.append(
                {
                    "token": token,
                    "logprob": max(lp.logprobs[0], _FLOOR),
                    "bytes": _bytes(token),
                    "top_logprobs": [
                        {
                            "token": lp.tokens[i],
                            "logprob": max(lp.logprobs[i], _FLOOR),
                            "bytes": _bytes(lp.tokens[i]),
                        }
                        for i in range(n)
                    ],
                }
            )
        return {"content": content}


class CompletionLogprobs:
    """`choices[].logprobs` of a text completion; a stream's chunks continue the text offsets
    where the previous chunk's tokens ended."""

    __slots__ = ("_offset", "_top")

    def __init__(self, top: int, offset: int = 0) -> None:
        self._top = top  # -1: every entry the engine gave
        self._offset = offset

    def __call__(self, lps: list[Logprobs]) -> dict[str, Any]:
        tokens: list[str] = []
        token_logprobs: list[float | None] = []
        top_logprobs: list[dict[str, float] | None] = []
        offsets: list[int] = []
        top = self._top
        offset = self._offset
        for lp in lps:
            token = lp.tokens[0]
            tokens.append(token)
            if not lp.logprobs:  # an echoed prompt's first token: the model gives it none
                token_logprobs.append(None)
                top_logprobs.append(None)
            else:
                token_logprobs.append(max(lp.logprobs[0], _FLOOR))
                n = len(lp.ids) if top == -1 else min(top + 1, len(lp.ids))
                top_logprobs.append({lp.tokens[i]: max(lp.logprobs[i], _FLOOR) for i in range(n)})
            offsets.append(offset)
            offset += len(token)
        self._offset = offset
        return {
            "text_offset": offsets,
            "token_logprobs": token_logprobs,
            "tokens": tokens,
            "top_logprobs": top_logprobs,
        }


def formatter(chat: bool, s: Sampling) -> ChatLogprobs | CompletionLogprobs | None:
    """The request's logprobs format (None: it asked for none); with logprob_token_ids, every
    entry the engine gave (the sampled token and the ones asked for), as vLLM renders them."""
    top = s.logprobs
    if top is None:
        return None
    if s.logprob_token_ids:
        top = -1
    return ChatLogprobs(top) if chat else CompletionLogprobs(top)
