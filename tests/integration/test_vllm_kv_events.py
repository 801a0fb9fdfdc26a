"""A real vLLM engine's KV events, through the sidecar and the link, in the gateway's index:
the blocks vLLM says it stored carry the names the gateway computes for the same conversation
with the tokenizer the sidecar names (its chat template applied)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
import pytest_asyncio
from msgspec.structs import replace

from tests.engines import require, vllm_config
from tests.integration.kv_names import held_whole
from tests.integration.poll import until_async
from tests.integration.vllm_cluster import VllmCluster, vllm_cluster

pytestmark = pytest.mark.timeout(600)  # may be the first to start the shared engine

MODEL = "tiny-llama"
SYSTEM = "You answer questions about rivers. " * 30


@pytest_asyncio.fixture(scope="module")
async def cluster(tiny_model_dir: Path) -> AsyncIterator[VllmCluster]:
    """An engine of its own, publishing its KV events (the session's shared one does not)."""
    require("vllm")
    from engine_sidecar.backends.vllm.engine import start_engine

    engine = await start_engine(replace(vllm_config(tiny_model_dir), kv_events=True))
    try:
        async with vllm_cluster(tiny_model_dir, engine, "  default_max_tokens: 4") as c:
            yield c
    finally:
        engine.shutdown(10.0)


async def test_vllms_stored_blocks_are_named_as_the_gateway_names_the_prompt(
    cluster: VllmCluster,
) -> None:
    gw = cluster.gateway
    sidecar = cluster.sidecar.config.name
    caches, tokens = gw.fleet.kv.caches, gw.fleet.kv.tokens
    assert caches.block_size(sidecar) > 0
    assert tokens.spec(MODEL)  # (the model's directory, named in the sidecar's Info)
    await until_async(lambda: tokens.ready(MODEL), 60.0, "the gateway's tokenizer")
    messages: list[Any] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Which is the longest?"},
    ]
    async with openai.AsyncOpenAI(base_url=cluster.base_url, api_key="none", max_retries=0) as c:
        await c.chat.completions.create(model=MODEL, messages=messages, max_tokens=2)
    names = await held_whole(gw, sidecar, MODEL, messages, 3)
    assert caches.snapshots >= 1 and caches.events >= len(names)
