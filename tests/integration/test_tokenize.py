"""vLLM's /tokenize and /detokenize through the gateway: the ids a generation would get, from a
replica of the model."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from engine_sidecar.backends.sim import SimConfig
from engine_sidecar.backends.sim.tokenizer import SimTokenizer
from tests.integration.cluster import Cluster

MESSAGES: list[Any] = [{"role": "user", "content": "Tell me about shards."}]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster("gateway: {default_max_tokens: 8}", [{"sim": SimConfig(model="sim-llama")}])
    c.start()
    yield c
    c.stop()


def post(cluster: Cluster, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(
        f"{cluster.http_url}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_tokenize_counts_what_a_generation_counts(cluster: Cluster) -> None:
    with openai.OpenAI(base_url=f"{cluster.http_url}/v1", api_key="none", max_retries=0) as c:
        counts(cluster, c)


def counts(cluster: Cluster, client: openai.OpenAI) -> None:
    status, text = post(cluster, "/tokenize", {"model": "sim-llama", "prompt": "Tell me more"})
    assert status == 200
    assert text["count"] == len(text["tokens"]) and text["max_model_len"] == 4096
    done = client.completions.create(model="sim-llama", prompt="Tell me more", max_tokens=2)
    assert done.usage is not None and done.usage.prompt_tokens == text["count"]
    status, chat = post(cluster, "/tokenize", {"model": "sim-llama", "messages": MESSAGES})
    assert status == 200
    reply = client.chat.completions.create(model="sim-llama", messages=MESSAGES, max_tokens=2)
    assert reply.usage is not None and reply.usage.prompt_tokens == chat["count"]
    status, back = post(cluster, "/detokenize", {"model": "sim-llama", "tokens": text["tokens"]})
    # The sim's words hash into its vocabulary: its own decode is the reference, not the prompt.
    assert status == 200 and back["prompt"] == SimTokenizer().decode(text["tokens"])


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("/tokenize", {"model": "nope", "prompt": "x"}, 404, "model"),
        ("/tokenize", {"model": "sim-llama"}, 400, "prompt"),
        ("/tokenize", {"model": "sim-llama", "prompt": "x", "messages": MESSAGES}, 400, "prompt"),
        ("/tokenize", {"model": "sim-llama", "prompt": 5}, 400, "prompt"),
        ("/detokenize", {"model": "sim-llama", "tokens": [-1]}, 400, "tokens[0]"),
        ("/detokenize", {"model": "sim-llama", "tokens": [10**9]}, 400, "tokens"),
        ("/detokenize", {"model": "nope", "tokens": [1]}, 404, "model"),
    ],
)
def test_bad_requests_name_the_field(
    cluster: Cluster, path: str, body: dict[str, Any], status: int, param: str
) -> None:
    got, payload = post(cluster, path, body)
    assert got == status, payload
    assert payload["error"]["param"] == param
