"""n > 1 through the official SDK: n engine requests merged by choice index, as vLLM does it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.integration.cluster import Cluster
from tests.integration.poll import until

MESSAGES: list[Any] = [{"role": "user", "content": "Tell me about shards."}]
SEEDED: dict[str, Any] = {"temperature": 1.0, "seed": 41, "max_tokens": 24}


@pytest.fixture
def client(cluster: Cluster) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{cluster.http_url}/v1", api_key="none", max_retries=0) as c:
        yield c


def _one(client: openai.OpenAI, seed: int) -> Any:
    return client.chat.completions.create(
        model="sim-llama", messages=MESSAGES, **{**SEEDED, "seed": seed}
    )


def test_each_choice_is_the_request_with_its_seed(client: openai.OpenAI) -> None:
    out = client.chat.completions.create(model="sim-llama", messages=MESSAGES, n=3, **SEEDED)
    assert [c.index for c in out.choices] == [0, 1, 2]
    singles = [_one(client, 41 + i) for i in range(3)]
    assert [c.message.content for c in out.choices] == [
        s.choices[0].message.content for s in singles
    ]
    assert [c.finish_reason for c in out.choices] == [s.choices[0].finish_reason for s in singles]
    assert len({c.message.content for c in out.choices}) > 1  # the seeds differ
    assert out.usage is not None
    assert out.usage.prompt_tokens == singles[0].usage.prompt_tokens  # the prompt counts once
    assert out.usage.completion_tokens == sum(s.usage.completion_tokens for s in singles)


def test_streamed_choices_equal_the_unary_ones(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(model="sim-llama", messages=MESSAGES, n=3, **SEEDED)
    stream = client.chat.completions.create(
        model="sim-llama",
        messages=MESSAGES,
        n=3,
        stream=True,
        stream_options={"include_usage": True},
        **SEEDED,
    )
    texts = ["", "", ""]
    roles: list[int] = []
    finishes: dict[int, str] = {}
    usage = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
            continue
        for c in chunk.choices:
            assert c.index not in finishes, "a chunk after its choice finished"
            if c.delta.role:
                assert not any(texts), "every choice's role comes before any text"
                roles.append(c.index)
            texts[c.index] += c.delta.content or ""
            if c.finish_reason:
                finishes[c.index] = c.finish_reason
    assert sorted(roles) == [0, 1, 2]
    assert texts == [c.message.content for c in whole.choices]
    assert finishes == {c.index: c.finish_reason for c in whole.choices}
    assert usage is not None and whole.usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (
        whole.usage.prompt_tokens,
        whole.usage.completion_tokens,
    )


def test_completions_echo_each_choice(client: openai.OpenAI) -> None:
    out = client.completions.create(model="sim-llama", prompt="Shards of", n=2, echo=True, **SEEDED)
    assert len(out.choices) == 2
    assert all(c.text.startswith("Shards of") and len(c.text) > 9 for c in out.choices)


def test_a_client_gone_mid_stream_ends_every_choice(cluster: Cluster) -> None:
    body = {
        "model": "sim-llama",
        "messages": MESSAGES,
        "n": 4,
        "stream": True,
        "max_tokens": 4000,
        "ignore_eos": True,
    }

    def generated() -> int:
        return sum(s.backend.load().generated_tokens for s in cluster.sidecars)

    before = generated()
    with (
        httpx.Client(base_url=cluster.http_url, timeout=30.0) as http,
        http.stream("POST", "/v1/chat/completions", json=body) as resp,
    ):
        assert resp.status_code == 200
        seen: set[int] = set()
        for line in resp.iter_lines():  # until every choice is running
            if line.startswith("data: {") and '"content":"' in line:
                seen.add(int(line.split('"index":')[1].split(",")[0]))
            if len(seen) == 4:
                break

    def running() -> int:
        return sum(s.backend.load().running for s in cluster.sidecars)

    until(lambda: running() == 0, 10.0, "every choice aborted in its engine")
    assert generated() - before < 4000, "a choice ran to its end"
