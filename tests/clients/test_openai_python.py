"""The OpenAI Python SDK's AsyncOpenAI against the gateway: chat completions and completions,
given whole and streamed, with the SDK's own stream helper too; greedy answers are the same text
either way, with the same usage."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from tests.clients.conftest import MAX_TOKENS, MODEL, client_module
from tests.integration.vllm_cluster import VllmCluster

pytestmark = pytest.mark.timeout(600)  # may be the first to start the shared engine

MESSAGES: list[Any] = [{"role": "user", "content": "Tell me about shards."}]
COMMON: dict[str, Any] = {
    "model": MODEL,
    "max_tokens": MAX_TOKENS,
    "temperature": 0.0,
    "extra_body": {"ignore_eos": True},
}


@pytest_asyncio.fixture
async def client(served: VllmCluster) -> AsyncIterator[Any]:
    openai = client_module("openai")
    async with openai.AsyncOpenAI(
        base_url=served.base_url, api_key="none", max_retries=0, timeout=120.0
    ) as c:
        yield c


def _usage_of(usage: Any) -> tuple[int, int, int]:
    assert usage is not None
    return usage.prompt_tokens, usage.completion_tokens, usage.total_tokens


async def test_chat_whole_and_streamed(client: Any) -> None:
    whole = await client.chat.completions.create(messages=MESSAGES, **COMMON)
    assert whole.object == "chat.completion" and whole.model == MODEL
    (choice,) = whole.choices
    assert choice.finish_reason == "length" and choice.message.role == "assistant"
    prompt, completion, total = _usage_of(whole.usage)
    assert completion == MAX_TOKENS and total == prompt + MAX_TOKENS

    stream = await client.chat.completions.create(
        messages=MESSAGES, stream=True, stream_options={"include_usage": True}, **COMMON
    )
    text, roles, finish, usage, ids = "", [], None, None, set()
    async for chunk in stream:
        ids.add(chunk.id)
        assert chunk.object == "chat.completion.chunk"
        if chunk.usage is not None:
            assert chunk.choices == []
            usage = chunk.usage
            continue
        delta = chunk.choices[0].delta
        roles += [delta.role] if delta.role else []
        text += delta.content or ""
        finish = chunk.choices[0].finish_reason or finish
    assert len(ids) == 1
    assert roles == ["assistant"] and finish == "length"
    assert text == choice.message.content
    assert _usage_of(usage) == (prompt, completion, total)

    # The SDK's helper assembles the streamed answer itself (its final, parsed completion is
    # refused at finish_reason "length": its snapshot is the answer).
    async with client.chat.completions.stream(messages=MESSAGES, **COMMON) as helper:
        deltas = [e.delta async for e in helper if e.type == "content.delta"]
        final = helper.current_completion_snapshot
    assert "".join(deltas) == final.choices[0].message.content == choice.message.content
    assert final.choices[0].finish_reason == "length"


async def test_completions_whole_and_streamed(client: Any) -> None:
    whole = await client.completions.create(prompt="Shards are", **COMMON)
    assert whole.object == "text_completion"
    (choice,) = whole.choices
    assert choice.finish_reason == "length" and choice.text
    prompt, completion, total = _usage_of(whole.usage)
    assert completion == MAX_TOKENS and total == prompt + MAX_TOKENS

    stream = await client.completions.create(
        prompt="Shards are", stream=True, stream_options={"include_usage": True}, **COMMON
    )
    text, finish, usage, chunks = "", None, None, 0
    async for chunk in stream:
        chunks += 1
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.text
            finish = c.finish_reason or finish
    assert chunks >= MAX_TOKENS
    assert text == choice.text and finish == "length"
    assert _usage_of(usage) == (prompt, completion, total)
