"""The sim's distribution (sampler.py): its tables, each field's effect on the logits, logprobs."""

from __future__ import annotations

import itertools
import math
import random
from bisect import bisect_right
from typing import Any

import pytest

from engine_sidecar.backend import Sampling
from engine_sidecar.backends.sim import sampler
from engine_sidecar.backends.sim.sampler import (
    RAW_LOGPROBS,
    SHAPE,
    SPAN,
    N,
    Sampler,
    buckets,
    context,
    draw_fast,
    logprobs_at,
    refusal,
    table,
)
from engine_sidecar.backends.sim.tokenizer import FIRST_WORD_ID, SimTokenizer

TOK = SimTokenizer()
NEG_INF = float("-inf")


def draws(n: int, seed: int = 5) -> list[int]:
    rng = random.Random(seed)
    return [rng.getrandbits(64) for _ in range(n)]


def ranks_drawn(th: tuple[int, ...], n: int = 4000) -> set[int]:
    return {bisect_right(th, v & 0xFFFFFFFF) for v in draws(n)}


def test_the_raw_distribution_is_normalised_and_falls_by_rank() -> None:
    assert math.fsum(math.exp(x) for x in RAW_LOGPROBS) == pytest.approx(1.0)
    assert all(a > b for a, b in itertools.pairwise(RAW_LOGPROBS))
    assert len(SHAPE) == N == len(TOK.word_ids)


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p", "min_p", "ranks"),
    [
        (0.0, 0, 1.0, 0.0, {0}),  # greedy
        (1e-6, 0, 1.0, 0.0, {0}),  # below vLLM's epsilon: greedy too
        (1.0, 1, 1.0, 0.0, {0}),
        (1.0, 5, 1.0, 0.0, set(range(5))),
        # min_p 0.5 keeps the ranks with exp(-k/8) >= 0.5: k <= 5
        (1.0, 0, 1.0, 0.5, set(range(6))),
        # the smallest top mass >= 0.2: ranks 0 and 1 (0.1175 + 0.1037)
        (1.0, 0, 0.2, 0.0, {0, 1}),
    ],
)
def test_truncations_keep_the_top_ranks(
    temperature: float, top_k: int, top_p: float, min_p: float, ranks: set[int]
) -> None:
    assert ranks_drawn(table(temperature, top_k, top_p, min_p)) == ranks


def test_temperature_spreads_the_draws() -> None:
    cold, plain, hot = (ranks_drawn(table(t, 0, 1.0)) for t in (0.25, 1.0, 4.0))
    assert max(cold) < max(plain) < max(hot)


@pytest.mark.parametrize("params", [(1.0, 0, 1.0, 0.0), (0.7, 0, 0.9, 0.0), (0.0, 0, 1.0, 0.0)])
def test_buckets_draw_what_the_thresholds_draw(params: tuple[float, int, float, float]) -> None:
    th = table(*params)
    b = buckets(th)
    assert len(b) == 4096 and th[-1] == SPAN
    for v in draws(20000):
        assert draw_fast(v, th, b) == (context(v) + bisect_right(th, v & 0xFFFFFFFF)) % N


def word(i: int) -> int:
    return FIRST_WORD_ID + i


def logits_of(prompt: tuple[int, ...] = (), generated: tuple[int, ...] = (), **kw: Any) -> Any:
    s = Sampling(max_tokens=8, **kw)
    return Sampler(s, prompt or (1,), generated, TOK).logits(0, generated)


# Context 0: word i is at rank i, raw logit SHAPE[i].
@pytest.mark.parametrize(
    ("kw", "changed"),
    [
        ({"logit_bias": {word(3): 2.5, word(9): -1.0}}, {3: SHAPE[3] + 2.5, 9: SHAPE[9] - 1.0}),
        # positive logits divided, negative multiplied; prompt and generated words alike
        (
            {"repetition_penalty": 2.0, "prompt": (word(1),), "generated": (word(60), word(60))},
            {1: SHAPE[1] / 2.0, 60: SHAPE[60] * 2.0},
        ),
        # presence: once; frequency: per occurrence; over generated tokens only
        (
            {"presence_penalty": 0.5, "prompt": (word(2),), "generated": (word(4), word(4))},
            {4: SHAPE[4] - 0.5},
        ),
        (
            {"frequency_penalty": 0.5, "prompt": (word(2),), "generated": (word(4), word(4))},
            {4: SHAPE[4] - 1.0},
        ),
        # " the" is one token: always masked
        ({"bad_words": ("the",)}, {TOK.encode(" the")[0] - FIRST_WORD_ID: NEG_INF}),
        # a two-token bad word masks its second token only after its first
        ({"bad_words": ("of and",)}, {}),
        (
            {"bad_words": ("of and",), "generated": tuple(TOK.encode(" of"))},
            {TOK.encode(" and")[0] - FIRST_WORD_ID: NEG_INF},
        ),
    ],
)
def test_each_field_changes_the_logits_as_vllm_does(
    kw: dict[str, Any], changed: dict[int, float]
) -> None:
    prompt, generated = kw.pop("prompt", ()), kw.pop("generated", ())
    logits = logits_of(prompt, generated, **kw)
    assert {k: x for k, x in enumerate(logits) if x != SHAPE[k]} == pytest.approx(changed)


def test_allowed_token_ids_mask_every_other_word() -> None:
    logits = logits_of(allowed_token_ids=(word(7), word(300)))
    assert {k for k, x in enumerate(logits) if x != NEG_INF} == {7, 300}


@pytest.mark.parametrize(
    ("kw", "only"),
    [
        ({"logit_bias": {word(42): 100.0}}, {42}),
        ({"allowed_token_ids": (word(5), word(6))}, {5, 6}),
        ({"allowed_token_ids": (word(5), word(6)), "temperature": 0.0}, {5, 6}),
    ],
)
def test_the_draw_follows_the_changed_logits(kw: dict[str, Any], only: set[int]) -> None:
    s = Sampler(Sampling(max_tokens=8, **kw), (1,), (), TOK)
    assert {s.draw(v, []) for v in draws(500)} == only


def test_a_sampler_that_changes_nothing_draws_as_the_table() -> None:
    s = Sampling(max_tokens=8, temperature=0.8, top_p=0.9, presence_penalty=1.0)
    fast = sampler.table_for(s)
    slow = Sampler(s, (1,), (), TOK)  # nothing generated yet: no penalty applies
    for v in draws(3000):
        assert slow.draw(v, []) == draw_fast(v, *fast)


def test_logprobs_give_the_sampled_token_first_then_the_top_ranks() -> None:
    c = 350  # ranks wrap around the words
    top = [word((c + k) % N) for k in range(3)]
    inside = logprobs_at(c, top[1], (c + 1) % N, 3, TOK)
    assert inside.ids == (top[1], top[0], top[2])
    assert inside.logprobs == (RAW_LOGPROBS[1], RAW_LOGPROBS[0], RAW_LOGPROBS[2])
    assert inside.tokens == tuple(TOK.decode_token(t) for t in inside.ids)
    outside = logprobs_at(c, word(10), 10, 3, TOK)
    assert outside.ids == (word(10), *top)
    assert outside.logprobs[0] == RAW_LOGPROBS[(10 - c) % N]
    assert logprobs_at(c, word(10), 10, 0, TOK).ids == (word(10),)


def test_a_forced_token_is_certain() -> None:
    second = TOK.split_first(0) + 1
    lp = logprobs_at(0, second, 0, 2, TOK, forced=True)
    assert lp.ids == (second, word(0), word(1))
    assert lp.logprobs == (0.0, NEG_INF, NEG_INF)


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"logit_bias": {3: 1.0}}, "logit_bias"),  # a special token: never generated
        ({"logit_bias": {word(N): 1.0}}, "logit_bias"),  # a hashed piece
        ({"allowed_token_ids": ()}, "allowed_token_ids"),
        ({"allowed_token_ids": (word(1), 31000)}, "allowed_token_ids"),
        ({"repetition_penalty": 0.0}, "repetition_penalty"),
        ({"min_p": 1.5}, "min_p"),
        ({"logprobs": -2}, "logprobs"),
        ({"logprobs": -1}, None),  # every word
        ({"logit_bias": {word(0): 1.0, word(N - 1): -1.0}}, None),
        ({"allowed_token_ids": (word(0),), "min_p": 1.0, "logprobs": 0}, None),
    ],
)
def test_refusal_names_the_field(kw: dict[str, Any], field: str | None) -> None:
    refused = refusal(Sampling(max_tokens=8, **kw))
    assert (refused and refused[0]) == field
