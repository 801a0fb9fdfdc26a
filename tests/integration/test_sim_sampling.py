"""The sampling fields the sim honours take effect through the gateway (the official SDK)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from engine_sidecar.backends.sim.tokenizer import SimTokenizer
from tests.integration.cluster import Cluster

MESSAGES: list[Any] = [{"role": "user", "content": "Tell me about shards."}]
TOK = SimTokenizer()
RIVER = TOK.encode(" river")[0]


@pytest.fixture
def client(cluster: Cluster) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{cluster.http_url}/v1", api_key="none", max_retries=0) as c:
        yield c


def chat(client: openai.OpenAI, max_tokens: int = 40, **kw: Any) -> Any:
    extra = {"ignore_eos": True, **kw.pop("extra_body", {})}
    return client.chat.completions.create(
        model="sim-llama",
        messages=MESSAGES,
        max_tokens=max_tokens,
        seed=7,
        extra_body=extra,
        **kw,
    ).choices[0]


def words(client: openai.OpenAI, **kw: Any) -> list[str]:
    content = chat(client, **kw).message.content
    assert isinstance(content, str)
    return content.split()


def test_chat_logprobs_come_with_each_token(client: openai.OpenAI) -> None:
    choice = chat(client, max_tokens=12, logprobs=True, top_logprobs=3)
    content = choice.logprobs.content
    assert len(content) == 12
    assert "".join(t.token for t in content) == choice.message.content
    for t in content:
        # vLLM's order: the sampled token first, then the others by rank
        top = t.top_logprobs
        assert len(top) == 3 and (top[0].token, top[0].logprob) == (t.token, t.logprob)
        assert top[1].logprob >= top[2].logprob and t.logprob < 0
        assert t.bytes == list(t.token.encode())
    # The same tokens as without logprobs: asking for them changes nothing else.
    assert chat(client, max_tokens=12).message.content == choice.message.content


def test_streamed_chat_logprobs_equal_the_whole_answers(client: openai.OpenAI) -> None:
    whole = chat(client, max_tokens=10, logprobs=True, top_logprobs=2).logprobs.content
    stream = client.chat.completions.create(
        model="sim-llama",
        messages=MESSAGES,
        max_tokens=10,
        seed=7,
        logprobs=True,
        top_logprobs=2,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    streamed = [
        t
        for c in stream
        if c.choices and c.choices[0].logprobs
        for t in c.choices[0].logprobs.content or []
    ]
    assert [(t.token, t.logprob) for t in streamed] == [(t.token, t.logprob) for t in whole]


def test_completion_logprobs(client: openai.OpenAI) -> None:
    out = client.completions.create(
        model="sim-llama",
        prompt="Once upon a time",
        max_tokens=8,
        logprobs=2,
        extra_body={"ignore_eos": True},
    )
    lp = out.choices[0].logprobs
    assert lp is not None and lp.tokens is not None and lp.top_logprobs is not None
    assert "".join(lp.tokens) == out.choices[0].text
    assert all(2 <= len(top) <= 3 for top in lp.top_logprobs)
    probs = [math.exp(x) for x in lp.token_logprobs or []]
    assert len(probs) == 8 and all(0.0 < p < 1.0 for p in probs)


def test_logit_bias_decides_the_tokens(client: openai.OpenAI) -> None:
    assert set(words(client, logit_bias={str(RIVER): 100})) == {"river"}


def test_allowed_token_ids_limit_the_tokens(client: openai.OpenAI) -> None:
    allowed = TOK.encode(" sea sky sun")
    got = words(client, extra_body={"allowed_token_ids": allowed})
    assert set(got) <= {"sea", "sky", "sun"} and len(set(got)) > 1


def test_bad_words_are_never_generated(client: openai.OpenAI) -> None:
    plain = words(client, temperature=0)
    banned = plain[0]
    steered = words(client, temperature=0, extra_body={"bad_words": [banned]})
    assert banned not in steered and len(steered) == len(plain)


def test_min_p_cuts_the_tail(client: openai.OpenAI) -> None:
    # At temperature 1 a min_p of 0.95 leaves only the most likely token: greedy.
    greedy = words(client, temperature=0)
    assert words(client, temperature=1.0, extra_body={"min_p": 0.95}) == greedy
    assert words(client, temperature=1.0) != greedy


@pytest.mark.parametrize(
    "penalty",
    [
        {"presence_penalty": 2.0},
        {"frequency_penalty": 2.0},
        {"extra_body": {"repetition_penalty": 3.0}},
    ],
    ids=["presence", "frequency", "repetition"],
)
def test_penalties_hold_back_a_repeated_token(
    client: openai.OpenAI, penalty: dict[str, Any]
) -> None:
    """A bias makes " river" the greedy choice wherever it is among the likely; a penalty on
    what was generated keeps it from coming back as often."""
    favoured = {"logit_bias": {str(RIVER): 2}, "temperature": 0, "max_tokens": 200}
    plain = words(client, **favoured).count("river")
    assert plain >= 4
    assert 1 <= words(client, **favoured, **penalty).count("river") * 2 < plain
