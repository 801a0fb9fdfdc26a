"""The sim's token distribution: what its tokens are drawn from, and their logprobs.

The sim generates word tokens only (SimTokenizer.word_ids, N of them). At each generated position
the seeded stream gives one 64-bit draw `v` (core.py); from it:

- the position's *context* `c = (v >> 44) % N` ranks the words: the word at rank k is word
  index `(c + k) % N`, and its raw logit is `SHAPE[k] = TOP_LOGIT - k * DECAY` (so the raw
  distribution is the same geometric shape at every position, turned by the context);
- the *uniform* `u = v & 0xFFFFFFFF` picks the token by inverse CDF over the ranks, in rank order,
  from the distribution the request's sampling fields make of the raw logits.

The request's fields apply as vLLM applies them, in its order: `allowed_token_ids` (every other
word masked), `bad_words` (a word that would complete one of them, tokenized with and without a
leading space, masked), `logit_bias` (added to a logit), `repetition_penalty` (over prompt +
generated words: a positive logit divided by it, a negative one multiplied), `frequency_penalty`
and `presence_penalty` (over generated words: minus penalty * count, minus penalty once), then
`temperature` (below 1e-5: greedy, the first rank of the highest logit), `min_p`, `top_k`,
`top_p`. "Generated" counts resumed tokens, so with every field a resumed request continues
exactly as its uninterrupted run (the sim resumes penalties exactly, which vLLM does not).

Without penalties, bias or masks, the processed distribution keeps the rank order, so a request's
draw is a table lookup (`table`); with them, `Sampler.draw` computes the N logits (the slow path,
only for requests that ask).

Logprobs are vLLM's default `raw_logprobs`: of the raw distribution (`RAW_LOGPROBS[k]` at rank k),
whatever the sampling fields; the sampled token first, then the top ranks. End of text is not in
the distribution: it stays the sim's own rule (SimConfig.eos_every).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from functools import lru_cache
from itertools import accumulate
from typing import Final

from shardgate.v1.params import Logprobs, Sampling

from engine_sidecar.backends.sim.tokenizer import FIRST_WORD_ID, WORDS, SimTokenizer

N: Final = len(WORDS)
TOP_LOGIT: Final = 4.0
DECAY: Final = 0.125
SHAPE: Final = tuple(TOP_LOGIT - k * DECAY for k in range(N))
_LSE: Final = math.log(math.fsum(math.exp(x) for x in SHAPE))
RAW_LOGPROBS: Final = tuple(x - _LSE for x in SHAPE)
SPAN: Final = 1 << 32  # the uniform's range
GREEDY_EPS: Final = 1e-5  # vLLM's: a lower temperature samples greedily
_NEG_INF: Final = float("-inf")


def context(v: int) -> int:
    return (v >> 44) % N


def _thresholds(probs: Sequence[float]) -> tuple[int, ...]:
    """The inverse CDF of weights in rank order, as integer thresholds over [0, SPAN): rank k
    is drawn for a uniform u with thresholds[k-1] <= u < thresholds[k]."""
    total = math.fsum(probs)
    out = [min(SPAN, round(x / total * SPAN)) for x in accumulate(probs)]
    out[-1] = SPAN
    return tuple(out)


def _top_k_top_p(probs: list[float], top_k: int, top_p: float) -> list[float]:
    """Zero the weights outside the top k, then outside the smallest top mass >= top_p."""
    if top_k <= 0 and top_p >= 1.0:
        return probs
    order = sorted(range(len(probs)), key=lambda k: -probs[k])  # stable: rank breaks ties
    keep = order[:top_k] if 0 < top_k < len(order) else order
    if top_p < 1.0:
        total = math.fsum(probs[k] for k in keep)
        mass, cut = 0.0, 0
        for cut, k in enumerate(keep, 1):  # noqa: B007 (cut is the count kept)
            mass += probs[k]
            if mass >= top_p * total:
                break
        keep = keep[:cut]
    out = [0.0] * len(probs)
    for k in keep:
        out[k] = probs[k]
    return out


def _min_p(probs: list[float], min_p: float) -> list[float]:
    if min_p <= 0.0:
        return probs
    floor = min_p * max(probs)
    return [p if p >= floor else 0.0 for p in probs]


@lru_cache(maxsize=256)
def table(temperature: float, top_k: int, top_p: float, min_p: float = 0.0) -> tuple[int, ...]:
    """The thresholds of the raw distribution after temperature, min_p, top_k and top_p:
    these keep the rank order, so any position's draw is `bisect_right(table, u)`."""
    if temperature < GREEDY_EPS:
        return (SPAN,)
    probs = [math.exp((x - TOP_LOGIT) / temperature) for x in SHAPE]
    return _thresholds(_top_k_top_p(_min_p(probs, min_p), top_k, top_p))


BUCKET_SHIFT: Final = 20  # the uniform's top 12 bits index a table's buckets


def buckets(thresholds: tuple[int, ...]) -> tuple[int, ...]:
    """For each of the 4096 equal ranges of the uniform, the rank every u in it draws, or -1
    where a threshold falls inside it (bisect then): most draws are one index, not a search."""
    out = []
    size = 1 << BUCKET_SHIFT
    for start in range(0, SPAN, size):
        k = bisect_right(thresholds, start)
        out.append(k if thresholds[k] >= start + size else -1)
    return tuple(out)


@lru_cache(maxsize=256)
def _table_and_buckets(
    temperature: float, top_k: int, top_p: float, min_p: float
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    th = table(temperature, top_k, top_p, min_p)
    return th, buckets(th)


def table_for(s: Sampling) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A request's thresholds (see `table`) and their buckets."""
    return _table_and_buckets(s.temperature, s.top_k, s.top_p, s.min_p)


def bad_word_ids(bad_words: Sequence[str], tokenizer: SimTokenizer) -> list[tuple[int, ...]]:
    """Each bad word's token ids without and with a leading space (vLLM's rule)."""
    out: list[tuple[int, ...]] = []
    for word in bad_words:
        for prefix in ("", " "):
            ids = tuple(tokenizer.encode(prefix + word.lstrip()))
            if ids and ids not in out:
                out.append(ids)
    return out


_WORD_IDS: Final = f"[{FIRST_WORD_ID}, {FIRST_WORD_ID + N})"


def refusal(s: Sampling) -> tuple[str, str] | None:
    """(field, message) where a field names tokens the sim never generates, or asks for an
    impossible value; None where the sim can honour the request as asked."""
    if s.logit_bias and any(not 0 <= t - FIRST_WORD_ID < N for t in s.logit_bias):
        return "logit_bias", f"logit_bias: the sim generates only the tokens {_WORD_IDS}"
    allowed = s.allowed_token_ids
    if allowed is not None:
        if not allowed:
            return "allowed_token_ids", "allowed_token_ids must not be empty"
        if any(not 0 <= t - FIRST_WORD_ID < N for t in allowed):
            return (
                "allowed_token_ids",
                f"allowed_token_ids: the sim generates only the tokens {_WORD_IDS}",
            )
    if s.repetition_penalty <= 0:
        return "repetition_penalty", "repetition_penalty must be greater than zero"
    if not 0.0 <= s.min_p <= 1.0:
        return "min_p", "min_p must be in [0, 1]"
    if s.logprobs is not None and s.logprobs < -1:
        return "logprobs", "logprobs must be at least 0, or -1 (all)"
    return None


def changes_logits(s: Sampling) -> bool:
    """Whether the request's fields change the logits (so it takes Sampler.draw)."""
    return bool(
        s.logit_bias
        or s.allowed_token_ids is not None
        or s.bad_words
        or s.presence_penalty
        or s.frequency_penalty
        or s.repetition_penalty != 1.0
    )


class Sampler:
    """The distribution of a request whose fields change the logits (see the module's doc).
    `note` each generated token (resumed ones at construction)."""

    __slots__ = (
        "allowed",
        "bad",
        "bias",
        "counts",
        "frequency",
        "min_p",
        "presence",
        "prompt_words",
        "repetition",
        "temperature",
        "top_k",
        "top_p",
    )

    def __init__(
        self,
        s: Sampling,
        prompt_ids: Sequence[int],
        generated: Sequence[int],
        tokenizer: SimTokenizer,
    ) -> None:
        self.bias = {t - FIRST_WORD_ID: b for t, b in (s.logit_bias or {}).items()}
        allowed = s.allowed_token_ids
        self.allowed = None if allowed is None else sorted({t - FIRST_WORD_ID for t in allowed})
        self.bad = bad_word_ids(s.bad_words, tokenizer)
        self.repetition = s.repetition_penalty
        self.frequency = s.frequency_penalty
        self.presence = s.presence_penalty
        self.temperature = s.temperature
        self.top_k = s.top_k
        self.top_p = s.top_p
        self.min_p = s.min_p
        self.prompt_words = {i for i in (t - FIRST_WORD_ID for t in prompt_ids) if 0 <= i < N}
        self.counts: dict[int, int] = {}
        for t in generated:
            self.note(t)

    def note(self, token_id: int) -> None:
        i = token_id - FIRST_WORD_ID
        if 0 <= i < N:
            self.counts[i] = self.counts.get(i, 0) + 1

    def logits(self, c: int, generated: Sequence[int]) -> list[float]:
        """The processed logits (before temperature) of the words in rank order at context c."""
        logits = list(SHAPE)
        if self.allowed is not None:
            masked = [_NEG_INF] * N
            for i in self.allowed:
                k = (i - c) % N
                masked[k] = logits[k]
            logits = masked
        for ids in self.bad:
            if len(ids) == 1 or tuple(generated[-(len(ids) - 1) :]) == ids[:-1]:
                i = ids[-1] - FIRST_WORD_ID
                if 0 <= i < N:
                    logits[(i - c) % N] = _NEG_INF
        for i, b in self.bias.items():
            logits[(i - c) % N] += b
        rep = self.repetition
        if rep != 1.0:
            for i in self.prompt_words | self.counts.keys():
                k = (i - c) % N
                x = logits[k]
                logits[k] = x / rep if x > 0 else x * rep
        if self.frequency or self.presence:
            for i, n in self.counts.items():
                logits[(i - c) % N] -= self.frequency * n + self.presence
        return logits

    def draw(self, v: int, generated: Sequence[int]) -> int:
        """The word index drawn at a position whose draw is v."""
        c = context(v)
        logits = self.logits(c, generated)
        top = max(logits)
        if self.temperature < GREEDY_EPS or top == _NEG_INF:
            return (c + logits.index(top)) % N
        t = self.temperature
        probs = [math.exp((x - top) / t) for x in logits]
        probs = _top_k_top_p(_min_p(probs, self.min_p), self.top_k, self.top_p)
        k = bisect_right(_thresholds(probs), v & 0xFFFFFFFF)
        return (c + k) % N


def draw_fast(v: int, thresholds: tuple[int, ...], buckets: tuple[int, ...]) -> int:
    """The word index drawn at a position whose draw is v, for a request without Sampler
    (core.py's fast path inlines it)."""
    u = v & 0xFFFFFFFF
    k = buckets[u >> BUCKET_SHIFT]
    if k < 0:
        k = bisect_right(thresholds, u)
    return ((v >> 44) % N + k) % N


def logprobs_at(
    c: int, token_id: int, drawn: int, n: int, tokenizer: SimTokenizer, *, forced: bool = False
) -> Logprobs:
    """A generated token's logprobs at context c: the raw logprob of the word drawn (word index
    `drawn`: the token itself, or the word a split word's first token stands in for), then the
    n top ranks (a top one that is the token appears once, first). `forced`: a token that was
    the only possible one (a split character's second token): logprob 0, every other -inf."""
    own = (drawn - c) % N
    ids = [token_id]
    lps = [0.0 if forced else RAW_LOGPROBS[own]]
    texts = [tokenizer.decode_token(token_id)]
    words = tokenizer.word_texts
    skip = own if token_id == FIRST_WORD_ID + drawn else -1
    for k in range(min(n, N)):
        if k == skip:
            continue
        w = (c + k) % N
        ids.append(FIRST_WORD_ID + w)
        lps.append(_NEG_INF if forced else RAW_LOGPROBS[k])
        texts.append(words[w])
    return Logprobs(tuple(ids), tuple(lps), tuple(texts))
