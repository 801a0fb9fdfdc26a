"""Through the sim: chat template controls are refused by name (its template is fixed), and
return_token_ids answers with the ids its engine ran (the prompt's as /tokenize gives them)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from engine_sidecar.backends.sim import SimConfig
from tests.integration.cluster import Cluster
from tests.integration.test_tokenize import post

MESSAGES: list[Any] = [{"role": "user", "content": "Tell me about shards."}]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster("gateway: {default_max_tokens: 8}", [{"sim": SimConfig(model="sim-llama")}])
    c.start()
    yield c
    c.stop()


@pytest.mark.parametrize(
    ("path", "fields", "param"),
    [
        ("/v1/chat/completions", {"add_generation_prompt": False}, "add_generation_prompt"),
        ("/v1/chat/completions", {"chat_template": "{{ messages }}"}, "chat_template"),
        ("/v1/chat/completions", {"chat_template_kwargs": {"x": 1}}, "chat_template_kwargs"),
        ("/v1/chat/completions", {"documents": [{"text": "x"}]}, "documents"),
        ("/v1/chat/completions", {"add_special_tokens": True}, "add_special_tokens"),
        ("/v1/completions", {"add_special_tokens": False}, "add_special_tokens"),
        ("/tokenize", {"add_generation_prompt": False}, "add_generation_prompt"),
    ],
)
def test_the_sim_refuses_template_controls_by_name(
    cluster: Cluster, path: str, fields: dict[str, Any], param: str
) -> None:
    body: dict[str, Any] = {"model": "sim-llama", **fields}
    if path == "/v1/completions":
        body["prompt"] = "Tell me"
    else:
        body["messages"] = MESSAGES
    status, answer = post(cluster, path, body)
    assert status == 400, answer
    assert answer["error"]["param"] == param
    assert param in answer["error"]["message"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("n", [1, 2])
def test_return_token_ids_are_the_ids_the_engine_ran(
    cluster: Cluster, stream: bool, n: int
) -> None:
    _, tokenized = post(cluster, "/tokenize", {"model": "sim-llama", "messages": MESSAGES})
    body = {
        "model": "sim-llama",
        "messages": MESSAGES,
        "return_token_ids": True,
        "n": n,
        "seed": 3,
        "max_tokens": 5,
        "stream": stream,
        **({"stream_options": {"include_usage": True}} if stream else {}),
    }
    if not stream:
        status, answer = post(cluster, "/v1/chat/completions", body)
        assert status == 200, answer
        assert answer["prompt_token_ids"] == tokenized["tokens"]
        assert [len(c["token_ids"]) for c in answer["choices"]] == [5] * n
        return
    import urllib.request

    req = urllib.request.Request(
        f"{cluster.http_url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        events = [  # (each event's data line: an `id:` line may come first)
            json.loads(line.removeprefix(b"data: "))
            for line in resp.read().split(b"\n")
            if line.startswith(b"data: {")
        ]
    prompts = [e["prompt_token_ids"] for e in events if "prompt_token_ids" in e]
    assert prompts == [tokenized["tokens"]] * n  # (each choice's first chunk)
    ids: dict[int, list[int]] = {}
    for e in events:
        for c in e["choices"]:
            ids.setdefault(c["index"], []).extend(c.get("token_ids", []))  # (not the role's)
    assert {i: len(v) for i, v in ids.items()} == dict.fromkeys(range(n), 5)
    assert events[-1]["usage"]["completion_tokens"] == 5 * n


@pytest.mark.parametrize("stream", [False, True])
def test_a_batch_of_prompts_answers_each_with_n_choices(cluster: Cluster, stream: bool) -> None:
    import openai

    prompts = ["Tell me", "About the shards of glass"]
    counts = [
        post(cluster, "/tokenize", {"model": "sim-llama", "prompt": p})[1]["count"] for p in prompts
    ]
    with openai.OpenAI(base_url=f"{cluster.http_url}/v1", api_key="none", max_retries=0) as c:
        kwargs: dict[str, Any] = {
            "model": "sim-llama",
            "prompt": prompts,
            "n": 2,
            "max_tokens": 3,
            "seed": 1,
        }
        texts: dict[int, str] = {}
        if stream:
            usage = None
            for chunk in c.completions.create(
                **kwargs, stream=True, stream_options={"include_usage": True}
            ):
                for ch in chunk.choices:
                    texts[ch.index] = texts.get(ch.index, "") + ch.text
                usage = chunk.usage or usage
        else:
            answer = c.completions.create(**kwargs)
            texts = {ch.index: ch.text for ch in answer.choices}
            usage = answer.usage
        # Each prompt alone, for its choices' texts: choice p * n + i is prompt p's i-th.
        alone = [c.completions.create(**{**kwargs, "prompt": p}) for p in prompts]
    assert sorted(texts) == [0, 1, 2, 3]
    assert [texts[i] for i in range(4)] == [ch.text for a in alone for ch in a.choices]
    assert usage is not None and usage.prompt_tokens == sum(counts)
    assert usage.completion_tokens == 4 * 3


def test_a_batch_s_choices_carry_their_own_prompt_s_ids(cluster: Cluster) -> None:
    prompts = ["Tell me", "About the shards of glass"]
    want = [
        post(cluster, "/tokenize", {"model": "sim-llama", "prompt": p})[1]["tokens"]
        for p in prompts
    ]
    body = {"model": "sim-llama", "prompt": prompts, "n": 2, "seed": 1, "max_tokens": 2}
    status, answer = post(cluster, "/v1/completions", {**body, "return_token_ids": True})
    assert status == 200, answer
    got = [(c["index"], c["prompt_token_ids"], len(c["token_ids"])) for c in answer["choices"]]
    assert got == [(i, want[i // 2], 2) for i in range(4)]
