"""vLLM's per-token logprobs -> the link's `Logprobs`, with tokens decoded as vLLM decodes them.

vLLM decodes a logprob's token only while its detokenizer runs. Where the sidecar makes a
request's text itself (a resumed request, vllm/text.py), the tokens are decoded here by vLLM's
own functions, with the request's sampled tokens so far, the resumed ones included, as the
context of a token that ends inside a character: as vLLM would have decoded them had the
request never been interrupted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shardgate.v1.params import Logprobs
from vllm.tokenizers.detokenizer_utils import convert_ids_list_to_tokens
from vllm.v1.engine.logprobs import LogprobsProcessor

# vLLM looks this many sampled tokens back to complete a character (LogprobsProcessor).
_CONTEXT = 4


class TokenTexts:
    """Decodes the tokens of one request's logprobs, position after position."""

    __slots__ = ("_context", "_proc", "_tokenizer")

    def __init__(self, tokenizer: Any, sampled_so_far: Sequence[int]) -> None:
        self._tokenizer = tokenizer
        self._context = list(sampled_so_far[-_CONTEXT:])
        self._proc = LogprobsProcessor(
            tokenizer=tokenizer,
            logprobs=None,
            prompt_logprobs=None,
            cumulative_logprob=None,
            num_logprobs=None,
            num_prompt_logprobs=None,
        )

    def decode(self, ids: list[int]) -> list[str]:
        """The texts of one position's tokens (the sampled one first)."""
        texts = convert_ids_list_to_tokens(self._tokenizer, ids)
        out: list[str] = self._proc._verify_tokens(texts, ids, self._context)
        self.skip(ids[0])
        return out

    def skip(self, sampled: int) -> None:
        """A position decoded elsewhere: its token is context for the next ones."""
        self._context.append(sampled)
        del self._context[:-_CONTEXT]


def to_prompt_logprobs(tokenizer: Any, prompt_ids: Sequence[int], positions: Any) -> list[Logprobs]:
    """vLLM's prompt logprobs (a {token id: Logprob} per prompt token, None for the first) ->
    one Logprobs per prompt token, with ranks; the first has only its id and its text (as
    vLLM's completions decode a token without logprobs). Tokens vLLM did not decode (its
    detokenizer off for the request) are decoded here as it would have."""
    texts = TokenTexts(tokenizer, prompt_ids[:1])
    out: list[Logprobs] = []
    for i, pos in enumerate(positions):
        if pos is None:
            first = prompt_ids[i]
            out.append(Logprobs((first,), (), (tokenizer.decode(first),)))
            continue
        ids = tuple(pos)
        entries = list(pos.values())
        if all(e.decoded_token is not None for e in entries):
            tokens = tuple([e.decoded_token for e in entries])
            texts.skip(ids[0])
        else:
            tokens = tuple(texts.decode(list(ids)))
        logprobs = tuple([e.logprob for e in entries])
        out.append(Logprobs(ids, logprobs, tokens, tuple([e.rank for e in entries])))
    return out


def to_logprobs(positions: Any, texts: TokenTexts | None) -> list[Logprobs]:
    """One step's logprobs (vLLM's list of {token id: Logprob} per generated token); `texts`
    where vLLM's detokenizer is off for the request, else vLLM's decoded tokens are taken."""
    out: list[Logprobs] = []
    for pos in positions:
        ids = tuple(pos)
        entries = pos.values()
        if texts is None:
            tokens = tuple([e.decoded_token or "" for e in entries])
        else:
            tokens = tuple(texts.decode(list(ids)))
        out.append(Logprobs(ids, tuple([e.logprob for e in entries]), tokens))
    return out
