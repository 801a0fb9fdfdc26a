"""A /v1/completions chunk's logprobs, asked with vLLM's `return_tokens_as_token_ids` -> the
link's `Logprobs`.

vLLM's completions answer lists, for each generated token, its logprob and a map of the
position's logprobs in vLLM's own order: the sampled token first, then the top ones by rank (a
token that is both once, first): exactly the entries of the link's `Logprobs`. With
`return_tokens_as_token_ids` each token is written "token_id:N", so the ids are exact (as text
several ids can read the same, byte tokens as U+FFFD). The tokens' texts are made on the
sidecar, as vLLM's detokenizer makes them (vllm/logprobs.py TokenTexts). The server sends -inf
as -9999.0; the gateway's rendering floors there too, so answers are the same.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from shardgate.v1.params import Logprobs

_PREFIX = "token_id:"

# One position: the ids (the sampled one first) and their logprobs.
Position = tuple[tuple[int, ...], tuple[float, ...]]


def token_id(token: str) -> int:
    """The id of a "token_id:N" token; raises ValueError on anything else."""
    if not token.startswith(_PREFIX):
        raise ValueError(f"a logprob's token is not a token id: {token[:40]!r}")
    return int(token[len(_PREFIX) :])


def positions(
    tokens: Sequence[str],
    token_logprobs: Sequence[float | None],
    top_logprobs: Sequence[dict[str, float] | None],
) -> list[Position]:
    """Each generated token's ids and logprobs; raises ValueError on lists that disagree or a
    token that is not a token id."""
    if not len(tokens) == len(token_logprobs) == len(top_logprobs):
        raise ValueError("the logprobs' lists have different lengths")
    out: list[Position] = []
    for token, logprob, top in zip(tokens, token_logprobs, top_logprobs, strict=True):
        sampled = token_id(token)
        if logprob is None:
            raise ValueError("a generated token without its logprob")
        ids, lps = [sampled], [logprob]
        for other, lp in (top or {}).items():
            i = token_id(other)
            if i != sampled:
                ids.append(i)
                lps.append(lp)
        out.append((tuple(ids), tuple(lps)))
    return out


def to_logprobs(ps: Sequence[Position], texts: Callable[[list[int]], list[str]]) -> list[Logprobs]:
    """The link's logprobs of `ps`; `texts` decodes one position's tokens (in turn: its context
    is the tokens sampled before)."""
    return [Logprobs(ids, lps, tuple(texts(list(ids)))) for ids, lps in ps]
