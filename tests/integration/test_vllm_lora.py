"""LoRA adapters loaded at run time into a real vLLM engine through the gateway.

LoRA must be enabled when the engine starts, so this module starts its own engine (the tiny
Llama with `enable_lora`), once; the adapter is the tiny random one (backends/tiny_lora.py).
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import openai
import pytest
import pytest_asyncio

from engine_sidecar.backends.tiny_lora import RANK, write_tiny_lora
from engine_sidecar.backends.vllm import VllmConfig
from engine_sidecar.config import SidecarConfig
from engine_sidecar.server import Sidecar
from gateway.app import Gateway
from gateway.config.loader import parse
from tests.engines import require, vllm_config

pytestmark = pytest.mark.timeout(600)  # starts an engine of its own

MODEL = "tiny-llama"
MESSAGES: list[Any] = [{"role": "user", "content": "Tell me about shards."}]
GREEDY: dict[str, Any] = {"temperature": 0.0, "extra_body": {"ignore_eos": True}}
ADMIN = {"Authorization": "Bearer sk-admin"}
LONG = 400  # tokens: a request still running when its adapter is unloaded
GATEWAY_YAML = """
gateway: {default_max_tokens: 16, admin_key: sk-admin}
sidecars:
  - {name: vllm-0, address: '127.0.0.1:%d'}
"""


class LoraCluster:
    def __init__(self, gateway: Gateway, adapter: Path) -> None:
        self.gateway = gateway
        self.adapter = adapter
        self.url = f"http://127.0.0.1:{gateway.http_port}"


def lora_config(tiny_dir: Path) -> VllmConfig:
    return msgspec.structs.replace(vllm_config(tiny_dir), enable_lora=True, max_lora_rank=RANK)


@pytest_asyncio.fixture(scope="module")
async def cluster(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[LoraCluster]:
    require("vllm")
    from engine_sidecar.backends.vllm.backend import VllmBackend
    from engine_sidecar.backends.vllm.engine import start_engine

    vllm = lora_config(tiny_model_dir)
    engine = await start_engine(vllm)
    sidecar = Sidecar(
        SidecarConfig(name="vllm-0", port=0, backend="vllm", vllm=vllm),
        backend=VllmBackend(vllm, engine=engine),
    )
    gateway: Gateway | None = None
    try:
        await sidecar.start()
        gateway = Gateway(parse(GATEWAY_YAML % sidecar.port), http_port=0, grpc_port=0)
        await gateway.start()
        assert await gateway.fleet.wait_connected(30.0), "the sidecar did not connect"
        yield LoraCluster(gateway, write_tiny_lora(tmp_path_factory.mktemp("lora") / "a"))
    finally:
        if gateway is not None:
            await gateway.stop(1.0)
        await sidecar.stop(1.0)
        engine.shutdown(10.0)
        gc.collect()


@pytest_asyncio.fixture
async def client(cluster: LoraCluster) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=f"{cluster.url}/v1", api_key="none", max_retries=0, timeout=120.0
    ) as c:
        yield c


async def admin(cluster: LoraCluster, path: str, body: Any) -> httpx.Response:
    async with httpx.AsyncClient(timeout=120.0) as http:
        return await http.post(f"{cluster.url}{path}", json=body, headers=ADMIN)


async def answer(client: openai.AsyncOpenAI, model: str, max_tokens: int = 8) -> str:
    out = await client.chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=max_tokens, **GREEDY
    )
    assert out.model == model
    return out.choices[0].message.content or ""


async def test_an_adapter_loaded_at_run_time_serves_until_unloaded(
    cluster: LoraCluster, client: openai.AsyncOpenAI
) -> None:
    base = await answer(client, MODEL)
    body = {"lora_name": "tiny-lora", "lora_path": str(cluster.adapter)}
    r = await admin(cluster, "/v1/load_lora_adapter", body)
    assert r.status_code == 200, r.text
    assert r.text == "Success: LoRA adapter 'tiny-lora' added successfully."
    models = {m.id: m async for m in client.models.list()}
    assert models["tiny-lora"].model_extra is not None
    assert models["tiny-lora"].model_extra["parent"] == MODEL
    adapted = await answer(client, "tiny-lora")
    assert adapted != base  # the adapter's weights change the greedy answer
    assert await answer(client, MODEL) == base

    # A request running on the adapter when it is unloaded finishes on it, as in vLLM.
    whole = await answer(client, "tiny-lora", max_tokens=LONG)
    stream = await client.chat.completions.create(
        model="tiny-lora", messages=MESSAGES, max_tokens=LONG, stream=True, **GREEDY
    )
    chunks = aiter(stream)
    first = await anext(chunks)
    r = await admin(cluster, "/v1/unload_lora_adapter", {"lora_name": "tiny-lora"})
    assert r.status_code == 200, r.text
    assert r.text == "Success: LoRA adapter 'tiny-lora' removed successfully."
    assert cluster.gateway.fleet.by_name["vllm-0"].inflight == 1  # (it was still running)
    rest = [c async for c in chunks]
    text = "".join(c.choices[0].delta.content or "" for c in [first, *rest] if c.choices)
    assert text == whole
    assert [c.choices[0].finish_reason for c in rest if c.choices][-1] == "length"

    with pytest.raises(openai.NotFoundError):
        await answer(client, "tiny-lora")
    assert "tiny-lora" not in {m.id async for m in client.models.list()}
    # Loaded again (a new adapter id to the engine), it serves as before.
    assert (await admin(cluster, "/v1/load_lora_adapter", body)).status_code == 200
    assert await answer(client, "tiny-lora") == adapted
    assert (await admin(cluster, "/v1/unload_lora_adapter", {"lora_name": "tiny-lora"})).is_success


async def test_an_adapter_that_is_not_there_is_404_and_the_engine_lives_on(
    cluster: LoraCluster, client: openai.AsyncOpenAI, tmp_path: Path
) -> None:
    body = {"lora_name": "missing", "lora_path": str(tmp_path / "nothing-here")}
    r = await admin(cluster, "/v1/load_lora_adapter", body)
    assert r.status_code == 404, r.text
    error = r.json()["error"]
    assert (
        error["message"] == f"Loading lora missing failed: No adapter found for {body['lora_path']}"
    )
    assert error["param"] == "lora_path"
    assert "missing" not in {m.id async for m in client.models.list()}
    assert await answer(client, MODEL)


async def test_a_caller_without_the_admin_key_is_refused(cluster: LoraCluster) -> None:
    async with httpx.AsyncClient(timeout=30.0) as http:
        r = await http.post(
            f"{cluster.url}/v1/load_lora_adapter",
            json={"lora_name": "x", "lora_path": str(cluster.adapter)},
            headers={"Authorization": "Bearer none"},
        )
    assert r.status_code == 401
