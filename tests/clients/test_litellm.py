"""litellm as a client library against the gateway (`api_base`, model "openai/<name>"):
`completion` and `acompletion`, given whole and streamed, with the usage it reports."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import ModuleType
from typing import Any

import pytest
import pytest_asyncio

from tests.clients.conftest import MAX_TOKENS, MODEL, client_module
from tests.integration.vllm_cluster import VllmCluster

pytestmark = [
    pytest.mark.timeout(600),  # may be the first to start the shared engine
    # litellm's async stream reads fields that pydantic (2.11 on) deprecates on instances.
    pytest.mark.filterwarnings(
        "ignore:Accessing the 'model_.*' attribute on the instance:DeprecationWarning"
    ),
]

MESSAGES: list[Any] = [{"role": "user", "content": "Tell me about shards."}]


@pytest_asyncio.fixture(scope="module")
async def litellm() -> AsyncIterator[ModuleType]:
    # litellm fetches its model cost map from the network at import unless told to use its own.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        module = client_module("litellm")
    yield module
    await module.close_litellm_async_clients()  # (the connections its async calls keep)


def _args(served: VllmCluster, **extra: Any) -> dict[str, Any]:
    return {
        "model": f"openai/{MODEL}",
        "api_base": served.base_url,
        "api_key": "none",
        "messages": MESSAGES,
        "max_tokens": MAX_TOKENS,
        "temperature": 0.0,
        "extra_body": {"ignore_eos": True},
        "num_retries": 0,
        "timeout": 120.0,
        **extra,
    }


def _whole(r: Any) -> tuple[str, tuple[int, int, int]]:
    (choice,) = r.choices
    assert choice.finish_reason == "length"
    u = r.usage
    assert u.completion_tokens == MAX_TOKENS and u.total_tokens == u.prompt_tokens + MAX_TOKENS
    return choice.message.content, (u.prompt_tokens, u.completion_tokens, u.total_tokens)


def _streamed(chunks: list[Any]) -> tuple[str, tuple[int, int, int]]:
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finishes == ["length"]
    usages = [u for c in chunks if (u := getattr(c, "usage", None)) is not None]
    assert usages
    u = usages[-1]
    return text, (u.prompt_tokens, u.completion_tokens, u.total_tokens)


async def test_completion_whole_and_streamed(litellm: ModuleType, served: VllmCluster) -> None:
    def blocking() -> tuple[Any, list[Any]]:  # (its blocking client, in a worker thread)
        whole = litellm.completion(**_args(served))
        stream = litellm.completion(
            **_args(served, stream=True, stream_options={"include_usage": True})
        )
        return whole, list(stream)

    whole, chunks = await asyncio.to_thread(blocking)
    text, usage = _whole(whole)
    assert text
    assert _streamed(chunks) == (text, usage)


async def test_acompletion_whole_and_streamed(litellm: ModuleType, served: VllmCluster) -> None:
    text, usage = _whole(await litellm.acompletion(**_args(served)))
    stream = await litellm.acompletion(
        **_args(served, stream=True, stream_options={"include_usage": True})
    )
    chunks = [c async for c in stream]
    assert _streamed(chunks) == (text, usage)
