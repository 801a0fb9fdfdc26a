"""LoRA adapters by model name (vLLM's convention): listed in /v1/models with their parent; a
request that names one runs only on the replicas that hold it, and its response names it."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from engine_sidecar.backends.sim import SimConfig
from tests.integration.cluster import Cluster

MESSAGES: list[Any] = [{"role": "user", "content": "Tell me about shards."}]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster(
        "gateway: {default_max_tokens: 8}",
        [
            {"sim": SimConfig(model="sim-llama", loras=["sql-adapter"])},
            {"sim": SimConfig(model="sim-llama")},
        ],
    )
    c.start()
    yield c
    c.stop()


def test_adapters_are_listed_with_their_parent(cluster: Cluster) -> None:
    with urllib.request.urlopen(f"{cluster.http_url}/v1/models", timeout=10) as resp:
        data = {m["id"]: m for m in json.loads(resp.read())["data"]}
    assert data["sim-llama"]["parent"] is None
    assert data["sql-adapter"]["parent"] == "sim-llama"
    assert data["sql-adapter"]["max_model_len"] == data["sim-llama"]["max_model_len"]
    with urllib.request.urlopen(f"{cluster.http_url}/v1/models/sql-adapter", timeout=10) as r:
        assert json.loads(r.read())["parent"] == "sim-llama"


def test_a_request_naming_an_adapter_runs_where_it_is_loaded(cluster: Cluster) -> None:
    holder = f"127.0.0.1:{cluster.sidecars[0].port}"
    with openai.OpenAI(base_url=f"{cluster.http_url}/v1", api_key="none", max_retries=0) as c:
        for _ in range(6):  # the other replica is idle: only the adapter keeps them here
            raw = c.chat.completions.with_raw_response.create(
                model="sql-adapter", messages=MESSAGES, max_tokens=4
            )
            assert raw.headers["x-shardgate-replica"] == holder
            assert raw.parse().model == "sql-adapter"
        stream = c.chat.completions.create(
            model="sql-adapter", messages=MESSAGES, max_tokens=4, stream=True
        )
        assert {chunk.model for chunk in stream} == {"sql-adapter"}
        with pytest.raises(openai.NotFoundError):
            c.chat.completions.create(model="no-such-adapter", messages=MESSAGES, max_tokens=4)
